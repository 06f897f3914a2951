-- One batch of the deadline engine's close path as a single statement: claim
-- 500 due orders (locking each with its deadline row), close them (a HOT
-- update), delete their deadline rows, log them, and write an order.closed
-- event of the size Lapse writes, with a time-ordered id. Like the engine's
-- claims, each client reads the due index on from the latest deadline it
-- claimed (:floor, milliseconds since the epoch, which \gset keeps from one
-- transaction to the next; pgbench -D floor=0 starts it), rather than over
-- the entries of the orders closed before. See setup.sql.
WITH c AS (
	SELECT o.id, d.deadline_at FROM order_deadlines d JOIN orders o ON o.id = d.order_id
	WHERE d.deadline_at <= '2026-11-29 13:00:00+00'
		AND d.deadline_at >= 'epoch'::timestamptz + :floor * interval '1 ms' AND d.flow = ANY('{checkout}')
	ORDER BY d.deadline_at LIMIT 500
	FOR NO KEY UPDATE OF o SKIP LOCKED FOR UPDATE OF d SKIP LOCKED
), u AS (
	UPDATE orders o SET state = 'CLOSED', deadline_at = NULL, closed_at = '2026-11-29 13:00:00+00', close_reason = 'TIMEOUT',
		fired_by = 'timer', updated_at = '2026-11-29 13:00:00+00', version = o.version + 1
	FROM c WHERE o.id = c.id AND o.state = 'UNPAID'
	RETURNING o.id, o.order_no, o.version
), dl AS (
	DELETE FROM order_deadlines d USING u WHERE d.order_id = u.id
), t AS (
	INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at)
	SELECT id, 'UNPAID', 'CLOSED', 'TIMEOUT', version, 'timer', '', '', '2026-11-29 13:00:00+00' FROM u
), x AS (
	INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
	SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || '7' || substr(md5(random()::text), 1, 19))::uuid,
		u.id, u.order_no, 'order.closed',
		'{"id":"0192f0a0-0000-7000-8000-000000000000","type":"order.closed","occurred_at":"2026-11-29T13:00:00Z","order":{"order_no":"BD-1-00000001","flow":"checkout","state":"CLOSED","deadline_at":null,"amount":1999,"currency":"CNY","user_id":"u-01","items":[{"sku":"sku-1","qty":1}],"metadata":{"channel":"bench"},"version":2,"created_at":"2026-11-29T12:00:00Z","updated_at":"2026-11-29T13:00:00Z","closed_at":"2026-11-29T13:00:00Z","close_reason":"TIMEOUT","fired_by":"timer"},"transition":{"from":"UNPAID","to":"CLOSED","event":"TIMEOUT","fired_by":"timer"}}'::json,
		'2026-11-29 13:00:00+00'
	FROM u
)
SELECT coalesce(floor(extract(epoch FROM max(c.deadline_at)) * 1000)::bigint, :floor) AS floor FROM c
\gset
