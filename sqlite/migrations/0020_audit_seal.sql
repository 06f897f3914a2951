-- The audit log sealed behind the writes. An audited write appends its row
-- unsealed, in its own transaction, without touching the head: an id (the
-- rowid) and no seq, prev_hash or hash yet, so that audited writes no
-- longer take turns at the head. A sealer (lapse.AuditSeal) then numbers
-- unsealed rows by seq, chains their hashes and moves the head, in one
-- transaction. Rows are listed by id; the chain is walked by seq, the order
-- rows were sealed in. A row is sealed (seq and hash set) or not (neither).
--
-- SQLite cannot change a primary key in place: the table is made anew and
-- its rows, all of them sealed, copied with id = seq.
CREATE TABLE audit_log_sealed (
    id            INTEGER PRIMARY KEY,
    seq           INTEGER,
    at            INTEGER NOT NULL,
    actor_kind    TEXT    NOT NULL,
    actor_id      TEXT    NOT NULL,
    actor_name    TEXT    NOT NULL,
    role          TEXT    NOT NULL,
    action        TEXT    NOT NULL,
    target        TEXT    NOT NULL,
    params        BLOB,
    result        TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    second_factor TEXT    NOT NULL,
    approver      TEXT    NOT NULL,
    approval_id   INTEGER NOT NULL,
    batch         INTEGER NOT NULL,
    client_addr   TEXT    NOT NULL,
    prev_hash     BLOB,
    hash          BLOB,
    CHECK ((seq IS NULL) = (hash IS NULL))
) STRICT;

INSERT INTO audit_log_sealed (id, seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result, reason,
    second_factor, approver, approval_id, batch, client_addr, prev_hash, hash)
SELECT seq, seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result, reason,
    second_factor, approver, approval_id, batch, client_addr, prev_hash, hash
FROM audit_log;

DROP TABLE audit_log;
ALTER TABLE audit_log_sealed RENAME TO audit_log;

-- The chain in seq order (AuditVerify), one row per seq; and the rows
-- still to seal, in id order (the sealer), which are few at any time.
CREATE UNIQUE INDEX audit_log_seq_key ON audit_log (seq) WHERE seq IS NOT NULL;
CREATE INDEX audit_log_unsealed_idx ON audit_log (id) WHERE seq IS NULL;

-- The filters of the console's audit view, each read in id order. Most
-- rows belong to no batch, and are not in its index.
CREATE INDEX audit_log_actor_idx ON audit_log (actor_name, id);
CREATE INDEX audit_log_action_idx ON audit_log (action, id);
CREATE INDEX audit_log_target_idx ON audit_log (target, id);
CREATE INDEX audit_log_batch_idx ON audit_log (batch, id) WHERE batch <> 0;
