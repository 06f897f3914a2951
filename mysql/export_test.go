package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// Queries whose plans the tests check.
var (
	OrderClaimDueSQL          = orderClaimDueSQL
	OrderNextDeadlineSQL      = orderNextDeadlineSQL
	DeliveryClaimSQL          = deliveryClaimSQL
	OrderCountDueSQL          = orderCountDueSQL
	OrderDeadlineListAfterSQL = orderDeadlineListAfterSQL
	AuditListSQL              = auditListSQL
	AuditUnsealedSQL          = auditUnsealedSQL
	AuditChainSQL             = auditChainSQL
	CloseItemListSQL          = closeItemListSQL
	OutboxPruneSQL            = outboxPruneSQL
	OutboxPruneAttemptsSQL    = outboxPruneAttemptsSQL
	OutboxPruneEffectsSQL     = outboxPruneEffectsSQL
	OutboxPruneDeliveriesSQL  = outboxPruneDeliveriesSQL
	OutboxPruneEventsSQL      = outboxPruneEventsSQL
	ReviewListQuery           = reviewListQuery
)

// Statements splits a migration file into its statements, as Migrate does.
var Statements = statements

// ReadOnlyVar is the name of the session's default access mode.
func (s *Store) ReadOnlyVar() string { return s.server.readOnlyVar() }

// MariaDB reports whether the server is MariaDB.
func (s *Store) MariaDB() bool { return s.server.mariadb }

// QueryRow runs a query of one row on the store's pool or transaction.
func (s *Store) QueryRow(ctx context.Context, query string, args ...any) interface{ Scan(...any) error } {
	return s.queryRow(ctx, query, args...)
}

// Exec runs a statement on the store's pool or transaction.
func (s *Store) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return s.exec(ctx, query, args...)
}

// Query runs a query on the store's pool, outside any transaction.
func (s *Store) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return s.pool.QueryContext(ctx, query, args...)
}

// Sleep runs SLEEP for d on one of the store's connections.
func (s *Store) Sleep(ctx context.Context, d time.Duration) error {
	var n int
	return s.queryRow(ctx, "SELECT SLEEP(?)", d.Seconds()).Scan(&n)
}

// Unavailable is the store's translation of driver errors.
var Unavailable = unavailable

// MigrateTo applies the migrations up to version v, the schema an older
// release left, for tests of an upgrade.
func (s *Store) MigrateTo(ctx context.Context, v int64) error {
	ms, err := changes()
	if err != nil {
		return err
	}
	var upTo []change
	for _, m := range ms {
		if m.Version <= v {
			upTo = append(upTo, m)
		}
	}
	return s.migrate(ctx, upTo)
}

// OpenDemotable opens a store whose server can be made to take no writes,
// as a primary demoted in a failover does, without changing the shared
// server's globals: while demoted, every connection the pool makes runs
// with read-only transactions, and demoting closes the idle ones; promoting
// again closes none, so that a read-only connection left in the pool shows. The tests may
// not set read_only on the shared server, and a DSN that sets tx_read_only
// is refused at Open.
func OpenDemotable(ctx context.Context, dsn string, cfg Config) (*Store, func(bool), error) {
	var demoted atomic.Bool
	var name string // written before demoted is first set, read after
	s, err := open(ctx, dsn, cfg, gomysql.BeforeConnect(func(_ context.Context, c *gomysql.Config) error {
		if demoted.Load() {
			c.Params[name] = "1"
		}
		return nil
	}))
	if err != nil {
		return nil, nil, err
	}
	name = s.server.readOnlyVar()
	return s, func(on bool) {
		demoted.Store(on)
		if on {
			s.pool.SetMaxIdleConns(0) // closes the idle connections
			s.pool.SetMaxIdleConns(cmp.Or(cfg.MaxConns, DefaultMaxConns))
		}
	}, nil
}

// OpenSessionVar opens a store whose every connection sets the session
// variable name to value as the server's own default would, not the DSN.
func OpenSessionVar(ctx context.Context, dsn string, cfg Config, name, value string) (*Store, error) {
	return open(ctx, dsn, cfg, gomysql.BeforeConnect(func(_ context.Context, c *gomysql.Config) error {
		c.Params[name] = value
		return nil
	}))
}
