package closes

import (
	"context"
	"time"

	"github.com/lapsehq/lapse"
)

// finishPause is how long Finish waits before it runs a stopped batch
// again the first time; each pause doubles, up to finishPauseMax.
var finishPause = time.Second

const finishPauseMax = time.Minute

// Finish runs batch batchID (Run) until it is done, for a process that runs
// a batch in the background (lapse serve): a Run that stops because the
// store is unavailable (an error with code EUNAVAILABLE, such as
// lapse.ErrStoreUnavailable: a failover, a pool that is full) is run again
// after a pause, 1 s doubling up to 1 min, rather than leaving the batch
// running with no one running it until the process starts again.
//
// It returns the batch as Run last returned it, with nil once it is done,
// or with the first error that is not EUNAVAILABLE (ctx's, an unknown
// batch, another store error), which it does not try again.
func (c *Closer) Finish(ctx context.Context, batchID int64, by *lapse.AuditEntry, progress func(*lapse.CloseBatch)) (*lapse.CloseBatch, error) {
	pause := finishPause
	for {
		b, err := c.Run(ctx, batchID, by, progress)
		if lapse.ErrorCode(err) != lapse.EUNAVAILABLE || ctx.Err() != nil {
			return b, err
		}
		select {
		case <-ctx.Done():
			return b, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, finishPauseMax)
	}
}
