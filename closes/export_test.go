package closes

import "time"

// SetFinishPause sets Finish's first pause for a test, and returns the
// restore.
func SetFinishPause(d time.Duration) func() {
	was := finishPause
	finishPause = d
	return func() { finishPause = was }
}
