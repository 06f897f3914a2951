-- Who may do what (lapse.AccessStore): the API keys of services, the
-- operators with their sessions, the requests held for a second operator,
-- the audit log and the batches of manual closes. The rules (hashing,
-- scopes, second factor, lockout, four eyes, the audit chain) live above the
-- store, in package access and lapse.AuditAppend; these tables keep what
-- they decided. A time that may be absent is NULL when it is.

-- Services' credentials, found by the prefix of the key. The key itself is
-- never kept, only the SHA-256 of all of it. scopes is a JSON array of
-- strings, in the order given. A revoked key stays, for the audit log's
-- sake, with the time it was revoked.
CREATE TABLE api_keys (
    id         INTEGER PRIMARY KEY,
    prefix     TEXT    NOT NULL UNIQUE,
    name       TEXT    NOT NULL,
    scopes     TEXT    NOT NULL,
    hash       BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    created_by TEXT    NOT NULL,
    revoked_at INTEGER
) STRICT;

-- People who log in to the console or the API, by name, with a role, an
-- argon2id password hash and a TOTP secret. failed_logins and locked_until
-- hold a lockout; last_totp_step keeps a code from being accepted twice. An
-- operator is disabled, never deleted, so that audit rows keep naming them.
CREATE TABLE operators (
    id             INTEGER PRIMARY KEY,
    name           TEXT    NOT NULL UNIQUE,
    role           TEXT    NOT NULL,
    password_hash  TEXT    NOT NULL,
    totp_secret    TEXT    NOT NULL,
    failed_logins  INTEGER NOT NULL,
    locked_until   INTEGER,
    last_totp_step INTEGER NOT NULL,
    lang           TEXT    NOT NULL,
    time_zone      TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    disabled_at    INTEGER
) STRICT;

-- Operators' logins, by the SHA-256 of the token in their cookie (the token
-- is never kept), with when they last gave a second factor.
CREATE TABLE sessions (
    id               BLOB    PRIMARY KEY,
    operator_id      INTEGER NOT NULL REFERENCES operators (id),
    created_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    second_factor_at INTEGER,
    client_addr      TEXT    NOT NULL
) STRICT;

CREATE INDEX sessions_operator_idx ON sessions (operator_id);

-- Risky actions held for a second operator (four eyes): what is at stake,
-- the request to carry out as the API got it (JSON, kept byte for byte),
-- who made it and, once decided, who decided and how it ended. A request
-- moves only by a guarded update of its status.
CREATE TABLE approvals (
    id            INTEGER PRIMARY KEY,
    action        TEXT    NOT NULL,
    target        TEXT    NOT NULL,
    amount        INTEGER NOT NULL,
    currency      TEXT    NOT NULL,
    count         INTEGER NOT NULL,
    request       BLOB,
    reason        TEXT    NOT NULL,
    maker_id      INTEGER NOT NULL,
    maker_name    TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    status        TEXT    NOT NULL,
    approver_id   INTEGER NOT NULL,
    approver_name TEXT    NOT NULL,
    decided_at    INTEGER,
    result        TEXT    NOT NULL
) STRICT;

CREATE INDEX approvals_status_idx ON approvals (status, id);

-- The audit log: one row per action, numbered 1, 2, 3, … by seq, each
-- chained to the row before it by hash (lapse.AuditHash over prev_hash and
-- the row), so that a row changed, removed or inserted is found
-- (lapse.AuditVerify). params is the action's JSON as it was given, a BLOB
-- so that no byte of it changes. Rows are only ever appended.
CREATE TABLE audit_log (
    seq           INTEGER PRIMARY KEY,
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
    hash          BLOB    NOT NULL
) STRICT;

-- The filters of the console's audit view, each read in seq order.
CREATE INDEX audit_log_actor_idx ON audit_log (actor_name, seq);
CREATE INDEX audit_log_action_idx ON audit_log (action, seq);
CREATE INDEX audit_log_target_idx ON audit_log (target, seq);
CREATE INDEX audit_log_batch_idx ON audit_log (batch, seq);

-- The head of the audit log, in one row: the seq and hash of its last row
-- (0 and NULL while it is empty). Every append moves it with a guarded
-- update in the appender's transaction, so appenders take turns and each
-- chains onto the row before it; and because it is kept apart from the
-- rows, rows removed from the log's end are found too: the head still
-- names the last of them.
CREATE TABLE audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash BLOB
) STRICT;

INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, NULL);

-- Manual closes: the selection as it was asked for (JSON, byte for byte),
-- who asked, the approval it needed (0 when none), and how many of its
-- items were closed, skipped and failed once it is done.
CREATE TABLE close_batches (
    id          INTEGER PRIMARY KEY,
    selector    BLOB,
    reason      TEXT    NOT NULL,
    created_by  TEXT    NOT NULL,
    approval_id INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    status      TEXT    NOT NULL,
    total       INTEGER NOT NULL,
    closed      INTEGER NOT NULL,
    skipped     INTEGER NOT NULL,
    failed      INTEGER NOT NULL,
    finished_at INTEGER
) STRICT;

CREATE INDEX close_batches_status_idx ON close_batches (status, id);

-- The orders of a batch, frozen when it is made, one per order number, so
-- that a confirmed close closes what was previewed and a re-run after a
-- crash carries on with the items still pending, in order number order.
CREATE TABLE close_items (
    batch_id INTEGER NOT NULL REFERENCES close_batches (id),
    order_no TEXT    NOT NULL,
    status   TEXT    NOT NULL,
    detail   TEXT    NOT NULL,
    PRIMARY KEY (batch_id, order_no)
) STRICT, WITHOUT ROWID;

CREATE INDEX close_items_status_idx ON close_items (batch_id, status, order_no);
