-- The outbox partitioned by time, so that the pruner drops a day of events
-- as a table instead of deleting them row by row: a deleted row is a dead
-- tuple that VACUUM must find and every scan must step over until it does;
-- a dropped partition leaves nothing behind.
--
-- The partition key is the event id. Lapse's ids are UUIDv7, whose first
-- 48 bits are the milliseconds of the event's time, so that ids sort by
-- time as bytes; and the key of a unique index on a partitioned table must
-- hold the partition key, which id alone does: outbox_id_key stays one key
-- over every partition (lapse.ErrEventExists). The partitions:
--
--   - outbox_before: every event with an id before the moment of this
--     migration, that is the whole outbox as it was (and later ids made by
--     a clock that runs late);
--   - outbox_dYYYYMMDD: the events of one day (UTC) by their ids, made
--     ahead of time by the store (outbox_partition.go), the first from
--     the moment of this migration to the next midnight;
--   - outbox_default: ids that no other partition takes: other UUID
--     versions, a clock far ahead, and the events of a dropped day that
--     still had to stay (a delivery not done, an order in review).
--
-- The old table becomes outbox_before whole; the ids at or after the cut
-- (clock skew, other versions) move to the default first. Attaching the old
-- table reads it once, to check the bound, and builds outbox_order_idx on
-- it, under this migration's lock.
ALTER TABLE outbox RENAME TO outbox_before;
ALTER TABLE outbox_before RENAME CONSTRAINT outbox_id_key TO outbox_before_id_key;
-- The key was (order_id, seq); a partitioned table's must hold id. seq is
-- unique by its sequence, and nothing looks it up as a key.
ALTER TABLE outbox_before DROP CONSTRAINT outbox_pkey;
-- An identity belongs to one table; the parent draws seq from a sequence
-- of its own, which goes on where the identity stopped.
CREATE SEQUENCE outbox_seq;
SELECT setval('outbox_seq', coalesce((SELECT max(seq) FROM outbox_before), 0) + 1, false);
ALTER TABLE outbox_before ALTER COLUMN seq DROP IDENTITY;

CREATE TABLE outbox (
	seq        bigint      NOT NULL DEFAULT nextval('outbox_seq'),
	id         uuid        NOT NULL,
	order_id   bigint      NOT NULL,
	order_no   text        NOT NULL,
	type       text        NOT NULL,
	payload    json        NOT NULL,
	created_at timestamptz NOT NULL,
	CONSTRAINT outbox_id_key UNIQUE (id)
) PARTITION BY RANGE (id);
ALTER SEQUENCE outbox_seq OWNED BY outbox.seq;
CREATE INDEX outbox_order_idx ON outbox (order_id, seq);
CREATE TABLE outbox_default PARTITION OF outbox DEFAULT;

DO $$
DECLARE
	-- The first id of the millisecond this migration runs in.
	cut uuid := (lpad(to_hex(floor(extract(epoch FROM now()) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid;
BEGIN
	INSERT INTO outbox (seq, id, order_id, order_no, type, payload, created_at)
	SELECT seq, id, order_id, order_no, type, payload, created_at FROM outbox_before WHERE id >= cut;
	DELETE FROM outbox_before WHERE id >= cut;
	EXECUTE format('ALTER TABLE outbox ATTACH PARTITION outbox_before FOR VALUES FROM (MINVALUE) TO (%L)', cut);
END
$$;
