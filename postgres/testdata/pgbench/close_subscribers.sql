-- close.sql with the order.closed event fanned out to two subscribers, one
-- pending delivery each, in the shape OrderTransitionMany writes them
-- (deliveriesCTE in ../../outbox.go): the subscriber rows s joined to the
-- outbox rows written, ids drawn in blocks once those are written and
-- numbered within them in event order, each delivery chained (after_id)
-- after the newest of its order and subscriber. The deadline of each order
-- is kept as closed_deadline_at, as the store keeps it. Each client reads
-- on from the latest deadline it claimed, as close.sql does. See setup.sql.
WITH c AS (
	SELECT o.id, d.deadline_at FROM order_deadlines d JOIN orders o ON o.id = d.order_id
	WHERE d.deadline_at <= '2026-11-29 13:00:00+00'
		AND d.deadline_at >= 'epoch'::timestamptz + :floor * interval '1 ms' AND d.flow = ANY('{checkout}')
	ORDER BY d.deadline_at LIMIT 500
	FOR NO KEY UPDATE OF o SKIP LOCKED FOR UPDATE OF d SKIP LOCKED
), u AS (
	UPDATE orders o SET state = 'CLOSED', deadline_at = NULL, closed_at = '2026-11-29 13:00:00+00', close_reason = 'TIMEOUT',
		fired_by = 'timer', updated_at = '2026-11-29 13:00:00+00', version = o.version + 1, closed_deadline_at = c.deadline_at
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
	RETURNING id, order_id, order_no, type, created_at
), s AS (
	SELECT x.id AS event_id, sub.subscriber, row_number() OVER (ORDER BY x.order_id, sub.k) AS n
	FROM x, unnest('{webhook,stock}'::text[]) WITH ORDINALITY AS sub(subscriber, k)
), ds AS MATERIALIZED (
	SELECT x.id AS event_id, x.order_id, x.order_no, x.type, x.created_at, s.subscriber, s.n
	FROM s
	JOIN x ON x.id = s.event_id
), dk AS (
	SELECT array_agg(nextval(pg_get_serial_sequence('deliveries', 'id')) ORDER BY g) AS ids
	FROM generate_series(1, (SELECT (max(ds.n) + 1024 - 1) / 1024 FROM ds)) g
), dn AS (
	SELECT dk.ids[((ds.n - 1) / 1024 + 1)::int] + (ds.n - 1) % 1024 AS id, ds.*
	FROM ds, dk
), y AS (
	INSERT INTO deliveries (id, event_id, order_id, order_no, event_type, subscriber, status,
		next_attempt_at, created_at, updated_at, after_id)
	OVERRIDING SYSTEM VALUE
	SELECT dn.id, dn.event_id, dn.order_id, dn.order_no, dn.type, dn.subscriber, 'pending',
		dn.created_at, dn.created_at, dn.created_at,
		coalesce(lag(dn.id) OVER (PARTITION BY dn.order_id, dn.subscriber ORDER BY dn.n),
			(SELECT max(p.id) FROM deliveries p WHERE p.order_id = dn.order_id AND p.subscriber = dn.subscriber))
	FROM dn
)
SELECT coalesce(floor(extract(epoch FROM max(c.deadline_at)) * 1000)::bigint, :floor) AS floor FROM c
\gset
