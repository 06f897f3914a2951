// Package burndown is the burn-down benchmark of the deadline engine, shared
// by `lapse bench` and the side-by-side comparison in the bench module: a
// backlog of due orders, closed by the real engine as fast as it can.
//
// Run loads, through the store's own bulk path (OrderCreateMany: COPY on
// PostgreSQL), Orders due UNPAID checkout orders and NotDue times as many
// that are not due (their deadline a day away, so that the deadline index
// holds what a live shop's does), each with its creation log row and its
// order.created outbox row, as the engine writes them. Loading is not timed.
// Then one Claimer.RunOnce (engine.NewClaimer with Batch and Workers) closes
// the due orders, each with its log row, its order.closed outbox row and one
// delivery per subscriber; that alone is timed. Run reads every closed order
// back, checks that exactly the due ones closed, and reports closes per
// second and the close lag (closed_at − deadline_at) percentiles.
//
// Time. Loading takes a while, and the lag should not count it: the engine
// runs on a clock that is the wall clock shifted so that the run starts at
// the instant the load began. The due deadlines are 1 µs apart, the last one
// 1 µs before that instant, so every one is due when RunOnce starts and a
// lag is how long after its deadline an order closed with the whole backlog
// due at once.
//
// On PostgreSQL (Config.Postgres), Run also vacuums and analyzes the loaded
// tables before the run, as a database that has had its autovacuum would be,
// reads the WAL the run wrote (pg_current_wal_lsn before and after; it is the
// whole server's, so other sessions' writes count too) and the server
// settings that bear on the figures.
//
// Scratch makes the database a run loads into, and drops it after: a schema
// lapse_bench_<hex> on PostgreSQL, a database of that name on MySQL, a
// directory beside the given file on SQLite.
//
//	lapse bench --db postgres://user@host/db [--orders 100000] [--not-due 4] [--subscribers 0-8] [--batch 500] [--workers 2] [--keep]
//	go -C bench run . --orders 300000   # River, Lapse and pgbench, one after the other
package burndown
