-- Who may do what (lapse.AccessStore): the API keys of services, operators
-- and their sessions, requests waiting for a second operator, the audit log
-- and manual close batches. The rules (hashing, scopes, lockout, four eyes,
-- the chain) live above the store; these tables hold what they decided.
-- Optional times are NULL when absent. Bytes the caller gives (hashes, JSON
-- requests and parameters) are BLOBs, NULL when nil, so that they come back
-- exactly as sent.

-- API keys by their prefix, the part of the key before its secret; only the
-- SHA-256 of the whole key is kept. scopes is a JSON array of strings. A
-- revoked key stays, with its revoked_at.
CREATE TABLE api_keys (
    id         BIGINT          NOT NULL AUTO_INCREMENT,
    prefix     VARBINARY(1024) NOT NULL,
    name       VARBINARY(1024) NOT NULL,
    scopes     MEDIUMTEXT      NOT NULL,
    hash       VARBINARY(1024),
    created_at BIGINT          NOT NULL,
    created_by VARBINARY(1024) NOT NULL,
    revoked_at BIGINT,
    PRIMARY KEY (id),
    CONSTRAINT api_keys_prefix_key UNIQUE (prefix)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Operators, the people who log in, by name, with their password hash, TOTP
-- secret, the count of failed logins that locks them out, and the last TOTP
-- step accepted, so that no code is accepted twice. A login locks the row
-- (SELECT … FOR UPDATE) while it counts.
CREATE TABLE operators (
    id             BIGINT          NOT NULL AUTO_INCREMENT,
    name           VARBINARY(1024) NOT NULL,
    role           VARBINARY(1024) NOT NULL,
    password_hash  VARBINARY(1024) NOT NULL,
    totp_secret    VARBINARY(1024) NOT NULL,
    failed_logins  INT             NOT NULL DEFAULT 0,
    locked_until   BIGINT,
    last_totp_step BIGINT          NOT NULL DEFAULT 0,
    lang           VARBINARY(1024) NOT NULL DEFAULT '',
    time_zone      VARBINARY(1024) NOT NULL DEFAULT '',
    created_at     BIGINT          NOT NULL,
    disabled_at    BIGINT,
    PRIMARY KEY (id),
    CONSTRAINT operators_name_key UNIQUE (name)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Operators' logins, by the SHA-256 of the token in the cookie, which is
-- never kept. operator_sessions_operator_idx finds an operator's sessions
-- to end them all (a password change, a disabled operator). Operators are
-- disabled, never deleted, so a session's operator always exists.
CREATE TABLE operator_sessions (
    id               VARBINARY(255)  NOT NULL,
    operator_id      BIGINT          NOT NULL,
    created_at       BIGINT          NOT NULL,
    expires_at       BIGINT          NOT NULL,
    second_factor_at BIGINT,
    client_addr      VARBINARY(1024) NOT NULL DEFAULT '',
    PRIMARY KEY (id),
    INDEX operator_sessions_operator_idx (operator_id),
    CONSTRAINT operator_sessions_operator_fk FOREIGN KEY (operator_id) REFERENCES operators (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Risky actions held for a second operator (four eyes): what and how much
-- is at stake, the request to carry out once approved, who made and who
-- decided it. A request changes only by one guarded UPDATE … WHERE id = ?
-- AND status = ?. approvals_status_idx lists one status newest first.
CREATE TABLE approvals (
    id            BIGINT          NOT NULL AUTO_INCREMENT,
    action        VARBINARY(1024) NOT NULL,
    target        VARBINARY(1024) NOT NULL,
    amount        BIGINT          NOT NULL DEFAULT 0,
    currency      VARBINARY(1024) NOT NULL DEFAULT '',
    order_count   BIGINT          NOT NULL DEFAULT 0,
    request       MEDIUMBLOB,
    reason        TEXT            NOT NULL,
    maker_id      BIGINT          NOT NULL,
    maker_name    VARBINARY(1024) NOT NULL,
    created_at    BIGINT          NOT NULL,
    expires_at    BIGINT,
    status        VARBINARY(1024) NOT NULL,
    approver_id   BIGINT          NOT NULL DEFAULT 0,
    approver_name VARBINARY(1024) NOT NULL DEFAULT '',
    decided_at    BIGINT,
    result        TEXT            NOT NULL,
    PRIMARY KEY (id),
    INDEX approvals_status_idx (status, id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The audit log: one row per action, numbered 1, 2, 3, … (seq) and chained
-- by hash to the row before it (lapse.AuditHash), so that an edited, removed
-- or inserted row is found. Every column the hash covers is binary, so that
-- each comes back byte for byte, whatever the caller wrote; role, which for
-- a key holds all its scopes, and the free text are BLOBs, unbounded in
-- practice, so that no action goes unrecorded for a long one. A zero batch
-- or approval_id is none. The indexes serve AuditList's filters, each paged
-- by seq either way.
CREATE TABLE audit_log (
    seq           BIGINT          NOT NULL,
    at            BIGINT          NOT NULL,
    actor_kind    VARBINARY(1024) NOT NULL,
    actor_id      VARBINARY(1024) NOT NULL,
    actor_name    VARBINARY(1024) NOT NULL,
    role          BLOB            NOT NULL,
    action        VARBINARY(1024) NOT NULL,
    target        VARBINARY(1024) NOT NULL,
    params        MEDIUMBLOB,
    result        BLOB            NOT NULL,
    reason        BLOB            NOT NULL,
    second_factor VARBINARY(1024) NOT NULL,
    approver      VARBINARY(1024) NOT NULL,
    approval_id   BIGINT          NOT NULL,
    batch         BIGINT          NOT NULL,
    client_addr   VARBINARY(1024) NOT NULL,
    prev_hash     VARBINARY(255),
    hash          VARBINARY(255)  NOT NULL,
    PRIMARY KEY (seq),
    INDEX audit_log_actor_idx (actor_name, seq),
    INDEX audit_log_action_idx (action, seq),
    INDEX audit_log_target_idx (target, seq),
    INDEX audit_log_batch_idx (batch, seq)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The audit log's head: its one row holds the seq and hash of the last row
-- appended (0 and NULL before the first). An appender locks it (SELECT …
-- FOR UPDATE) in its transaction, so that appenders take turns; a locking
-- read sees the latest committed head, so each chains onto the row before
-- it and the chain does not fork. It also tells a log whose last rows were
-- deleted.
CREATE TABLE audit_head (
    id   TINYINT        NOT NULL,
    seq  BIGINT         NOT NULL,
    hash VARBINARY(255),
    PRIMARY KEY (id),
    CONSTRAINT audit_head_one_check CHECK (id = 1)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, NULL);

-- Manual closes: the selection as asked for (JSON), who asked, the approval
-- it needed (0: none), and the counts of its items as they end.
CREATE TABLE close_batches (
    id          BIGINT          NOT NULL AUTO_INCREMENT,
    selector    MEDIUMBLOB,
    reason      TEXT            NOT NULL,
    created_by  VARBINARY(1024) NOT NULL,
    approval_id BIGINT          NOT NULL DEFAULT 0,
    created_at  BIGINT          NOT NULL,
    status      VARBINARY(1024) NOT NULL,
    total       BIGINT          NOT NULL DEFAULT 0,
    closed      BIGINT          NOT NULL DEFAULT 0,
    skipped     BIGINT          NOT NULL DEFAULT 0,
    failed      BIGINT          NOT NULL DEFAULT 0,
    finished_at BIGINT,
    PRIMARY KEY (id),
    INDEX close_batches_status_idx (status, id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The orders of a close batch, frozen when it is made, one per order number,
-- so that a re-run after a crash carries on with those still pending. The
-- key pages a batch's items by order number; close_items_status_idx pages
-- those of one status.
CREATE TABLE close_items (
    batch_id BIGINT          NOT NULL,
    order_no VARBINARY(1024) NOT NULL,
    status   VARBINARY(1024) NOT NULL,
    detail   TEXT            NOT NULL,
    PRIMARY KEY (batch_id, order_no),
    INDEX close_items_status_idx (batch_id, status, order_no),
    CONSTRAINT close_items_batch_fk FOREIGN KEY (batch_id) REFERENCES close_batches (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
