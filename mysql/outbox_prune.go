package mysql

import (
	"context"

	"github.com/lapsehq/lapse"
)

// OutboxPrune is not written yet for this store: it refuses.
func (s *Store) OutboxPrune(ctx context.Context, p *lapse.OutboxPruneParams) (*lapse.OutboxPruned, error) {
	return nil, lapse.Errorf(lapse.EINTERNAL, "mysql: OutboxPrune is not written yet")
}
