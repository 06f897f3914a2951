package sqlite

import "strings"

// batchRows is the most rows one statement of a batch writes or matches:
// OrderTransitionMany updates, logs and fans out a batch of orders this
// many rows a statement. A statement a row costs its binding, stepping and
// cursors once a row; one of batchRows costs them once, and its text, the
// same for every full chunk, is prepared once a transaction. The most
// parameters a row takes (10) times this stays far below SQLite's limit of
// 32,766.
const batchRows = 100

// values is the VALUES list of rows rows of cols placeholders each:
// "(?, ?), (?, ?)".
func values(rows, cols int) string {
	row := "(" + marks(cols) + ")"
	var b strings.Builder
	b.Grow(rows * (len(row) + 2))
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}
