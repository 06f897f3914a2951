package main

import (
	"context"
	"log/slog"

	"github.com/lapsehq/lapse/internal/burndown"
	"github.com/lapsehq/lapse/postgres"
)

// runLapse is the Lapse burn-down (internal/burndown, as `lapse bench`
// runs it) in a scratch schema of its own.
func runLapse(ctx context.Context, dsn string, cfg burndown.Config, log *slog.Logger, say func(string)) (res *burndown.Result, err error) {
	sc, err := burndown.NewScratch(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer dropScratch(ctx, sc, &err)
	say("lapse: scratch schema " + sc.Name)
	s, err := postgres.Open(ctx, sc.DSN, postgres.Config{})
	if err != nil {
		return nil, err
	}
	defer s.Close() // before the drop, which waits for its sessions
	if err := s.Migrate(ctx); err != nil {
		return nil, err
	}
	cfg.Postgres, cfg.Logger = sc.DSN, log
	return burndown.Run(ctx, s, cfg)
}
