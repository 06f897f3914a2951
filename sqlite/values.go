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

// values is the VALUES list of n rows of cols placeholders each:
// "(?, ?), (?, ?)".
func values(n, cols int) string {
	return rowList(n, "("+marks(cols)+")")
}

// rowList is n copies of row, comma-separated.
func rowList(n int, row string) string {
	var b strings.Builder
	b.Grow(n * (len(row) + 2))
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}
