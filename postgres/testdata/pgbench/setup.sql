-- The raw-SQL baseline of the close path: the store's close tables and n
-- due orders among 5n, with the creation rows of all of them (their history
-- in the log and the outbox), in schema pgbench_close. From this directory:
--
--   psql "$LAPSE_TEST_POSTGRES" -q -v n=100000 -f setup.sql
--   PGOPTIONS=-csearch_path=pgbench_close pgbench -n -f close.sql -c 2 -j 2 -t 98 "$LAPSE_TEST_POSTGRES"
--
-- close_subscribers.sql is the same close with its event fanned out to two
-- subscribers.
--
-- One order in five is due, the other four wait on deadlines a year away,
-- laid out as internal/burndown (lapse bench, the bench module) loads them. Each transaction
-- closes 500 orders: closes/s = tps × 500. Keep -c × -t below n / 500 so
-- that every transaction finds a full batch.
\set ON_ERROR_STOP on
DROP SCHEMA IF EXISTS pgbench_close CASCADE;
CREATE SCHEMA pgbench_close;
SET search_path = pgbench_close;
\ir ../../migrations/0001_orders.sql
\ir ../../migrations/0002_transitions.sql
\ir ../../migrations/0003_outbox.sql
\ir ../../migrations/0004_deliveries.sql
\ir ../../migrations/0007_delivery_order.sql
\ir ../../migrations/0008_delivery_chain.sql
\ir ../../migrations/0019_close_path.sql
\ir ../../migrations/0021_closed_deadline.sql
\ir ../../migrations/0022_delivery_writes.sql
\ir ../../migrations/0023_delivery_hot.sql
\ir ../../migrations/0025_outbox_partitions.sql
-- The partition the closes' events go to, which the store makes ahead of
-- time (outbox_partition.go): from now to two days on.
DO $$
BEGIN
	CREATE TABLE outbox_dbench (LIKE outbox INCLUDING DEFAULTS INCLUDING STORAGE);
	EXECUTE format('ALTER TABLE outbox ATTACH PARTITION outbox_dbench FOR VALUES FROM (%L) TO (%L)',
		(lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid,
		(lpad(to_hex(floor(extract(epoch FROM clock_timestamp() + interval '2 days') * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid);
END
$$;

INSERT INTO orders (order_no, flow, state, deadline_at, amount, currency, user_id, items, metadata, version,
	created_at, updated_at, fired_by, request_hash)
SELECT 'PGB-' || g, 'checkout', 'UNPAID',
	CASE WHEN g % 5 = 1 THEN '2026-11-29 12:00:00+00'::timestamptz ELSE '2027-11-29 12:00:00+00'::timestamptz END + g * interval '1 ms',
	1999, 'CNY', 'u-' || (g % 100), '[{"sku":"sku-1","qty":1}]', '{"channel":"bench"}', 1,
	'2026-11-29 12:00:00+00', '2026-11-29 12:00:00+00', 'app', md5(g::text) || md5(g::text)
FROM generate_series(1, 5 * :n) g;
INSERT INTO order_deadlines (order_id, deadline_at, flow) SELECT id, deadline_at, flow FROM orders;
INSERT INTO transitions (order_id, to_state, event, version, fired_by, actor, created_at)
SELECT id, 'UNPAID', 'CREATE', 1, 'app', 'pgbench', created_at FROM orders;
-- Event ids are time-ordered (UUIDv7) as Lapse makes them.
INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
SELECT (lpad(to_hex(1764417600000 + id), 12, '0') || '7' || substr(md5(id::text), 1, 19))::uuid, id, order_no,
	'order.created', json_build_object('type', 'order.created', 'order', row_to_json(orders)), created_at
FROM orders;
VACUUM ANALYZE orders, order_deadlines, transitions, outbox;
CHECKPOINT;
