-- The audit log sealed behind the writes. An audited write appends its row
-- unsealed, in its own transaction, without touching the head: an id from
-- the table's identity and no seq, prev_hash or hash yet, so that audited
-- writes no longer queue on the head's row lock and share their WAL
-- flushes as other writes do. A sealer (lapse.AuditSeal) locks the head
-- (SKIP LOCKED: a busy sealer's peers skip their turn), numbers the
-- committed unsealed rows by seq in id order, chains their hashes and
-- moves the head, in one transaction. Rows are listed by id; the chain is
-- walked by seq, the order rows were sealed in, which is not the id order
-- when a row's transaction commits after rows of higher ids were sealed. A
-- row is sealed (seq and hash set) or not (neither).
--
-- The rows there are now are sealed already, and keep their seq as id.
ALTER TABLE audit_log ADD COLUMN id bigint;
UPDATE audit_log SET id = seq;
ALTER TABLE audit_log ALTER COLUMN id SET NOT NULL;
ALTER TABLE audit_log ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY;
SELECT setval(pg_get_serial_sequence('audit_log', 'id'), (SELECT coalesce(max(id), 0) + 1 FROM audit_log), false);
ALTER TABLE audit_log DROP CONSTRAINT audit_log_pkey;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);
ALTER TABLE audit_log ALTER COLUMN seq DROP NOT NULL, ALTER COLUMN hash DROP NOT NULL,
	ADD CONSTRAINT audit_log_sealed_check CHECK ((seq IS NULL) = (hash IS NULL));

-- The chain in seq order (AuditVerify), one row per seq; and the rows
-- still to seal, in id order (the sealer), which are few at any time.
CREATE UNIQUE INDEX audit_log_seq_key ON audit_log (seq) WHERE seq IS NOT NULL;
CREATE INDEX audit_log_unsealed_idx ON audit_log (id) WHERE seq IS NULL;

-- The filters of the console's and the API's audit views, now in id order.
DROP INDEX audit_log_actor_idx, audit_log_action_idx, audit_log_target_idx, audit_log_batch_idx;
CREATE INDEX audit_log_actor_idx ON audit_log (actor_name, id);
CREATE INDEX audit_log_action_idx ON audit_log (action, id);
CREATE INDEX audit_log_target_idx ON audit_log (target, id);
CREATE INDEX audit_log_batch_idx ON audit_log (batch, id) WHERE batch <> 0;
