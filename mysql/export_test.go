package mysql

import (
	"context"
	"database/sql"
	"time"
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
