-- The audit log sealed behind the writes. An audited write appends its row
-- unsealed, in its own transaction, without touching the head: an
-- AUTO_INCREMENT id and no seq, prev_hash or hash yet, so that audited
-- writes no longer queue on the head's row lock and share their log flushes
-- as other writes do. A sealer (lapse.AuditSeal) locks the head (SKIP
-- LOCKED: a busy sealer's peers skip their turn), numbers the committed
-- unsealed rows by seq in id order, chains their hashes and moves the
-- head, in one transaction. Rows are listed by id; the chain is walked by
-- seq, the order rows were sealed in, which is not the id order when a
-- row's transaction commits after rows of higher ids were sealed. A row is
-- sealed (seq and hash set) or not (neither).
--
-- The rows there are now are sealed already, and keep their seq as id.
-- audit_log_seq_key keeps one row per seq (and the unsealed ones, NULL, as
-- many as there are); audit_log_unsealed_idx reads those in id order, for
-- the sealer, which the unique key does not do without a sort on MariaDB.
-- The filters' indexes end in id, as every secondary index of InnoDB does,
-- for the pages of AuditList.
ALTER TABLE audit_log ADD COLUMN id BIGINT NOT NULL DEFAULT 0 FIRST;
UPDATE audit_log SET id = seq;
ALTER TABLE audit_log
    DROP PRIMARY KEY,
    MODIFY id BIGINT NOT NULL AUTO_INCREMENT,
    ADD PRIMARY KEY (id),
    MODIFY seq BIGINT NULL,
    MODIFY hash VARBINARY(255) NULL,
    ADD UNIQUE KEY audit_log_seq_key (seq),
    ADD INDEX audit_log_unsealed_idx (seq, id),
    DROP INDEX audit_log_actor_idx,
    DROP INDEX audit_log_action_idx,
    DROP INDEX audit_log_target_idx,
    DROP INDEX audit_log_batch_idx,
    ADD INDEX audit_log_actor_idx (actor_name, id),
    ADD INDEX audit_log_action_idx (action, id),
    ADD INDEX audit_log_target_idx (target, id),
    ADD INDEX audit_log_batch_idx (batch, id),
    ADD CONSTRAINT audit_log_sealed_check CHECK ((seq IS NULL) = (hash IS NULL));
