-- Who may do what (lapse.AccessStore): the API keys of services, the
-- operators with their sessions, the requests waiting for a second
-- operator, the hash-chained audit log and the batches of manual closes.
-- The rules (hashing, scopes, lockout, four eyes, the chain) live above the
-- store; these tables hold what they decided. A time that is absent is NULL.

-- Services' API keys, found by the prefix of the key. Only the SHA-256 of
-- the whole key is kept; a revoked key stays, so that the audit log's
-- "key:<prefix>" still names it and its prefix is never given again.
CREATE TABLE api_keys (
	id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	prefix     text        NOT NULL,
	name       text        NOT NULL,
	scopes     text[]      NOT NULL,
	hash       bytea       NOT NULL,
	created_at timestamptz NOT NULL,
	created_by text        NOT NULL,
	revoked_at timestamptz,
	CONSTRAINT api_keys_prefix_key UNIQUE (prefix)
);

-- The people who log in, by name. The login's counters (failures, lockout,
-- the last TOTP step accepted) sit on the row, which a login locks
-- (SELECT … FOR UPDATE) so that its read, decision and write are one step.
CREATE TABLE operators (
	id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name           text        NOT NULL,
	role           text        NOT NULL,
	password_hash  text        NOT NULL,
	totp_secret    text        NOT NULL,
	failed_logins  int         NOT NULL,
	locked_until   timestamptz,
	last_totp_step bigint      NOT NULL,
	lang           text        NOT NULL,
	time_zone      text        NOT NULL,
	created_at     timestamptz NOT NULL,
	disabled_at    timestamptz,
	CONSTRAINT operators_name_key UNIQUE (name)
);

-- Operators' logins, by the SHA-256 of the cookie's token (the token itself
-- is never kept). Operators are never deleted, only disabled, so a session
-- always names one.
CREATE TABLE sessions (
	id               bytea       PRIMARY KEY,
	operator_id      bigint      NOT NULL REFERENCES operators (id),
	created_at       timestamptz NOT NULL,
	expires_at       timestamptz NOT NULL,
	second_factor_at timestamptz,
	client_addr      text        NOT NULL
);

-- For logging an operator out everywhere (a password change, a disable).
CREATE INDEX sessions_operator_idx ON sessions (operator_id);

-- Risky actions held for a second operator (four eyes), with the request to
-- carry out, as the API got it, once approved. A request changes only by a
-- guarded UPDATE from the status it was read in, so two deciders cannot both
-- win. Maker and approver are kept by id and by name, as they were then;
-- approver_id is 0 until someone decides.
CREATE TABLE approvals (
	id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	action        text        NOT NULL,
	target        text        NOT NULL,
	amount        bigint      NOT NULL,
	currency      text        NOT NULL,
	count         bigint      NOT NULL,
	request       bytea,
	reason        text        NOT NULL,
	maker_id      bigint      NOT NULL,
	maker_name    text        NOT NULL,
	created_at    timestamptz NOT NULL,
	expires_at    timestamptz NOT NULL,
	status        text        NOT NULL,
	approver_id   bigint      NOT NULL,
	approver_name text        NOT NULL,
	decided_at    timestamptz,
	result        text        NOT NULL
);

-- The console's queue: the pending requests, newest first.
CREATE INDEX approvals_status_idx ON approvals (status, id);

-- The audit log, numbered 1, 2, 3, … by the appender and chained by hash:
-- each row's hash covers the previous row's, so an edited, removed or
-- inserted row is found (lapse.AuditVerify). The primary key on seq keeps
-- two appenders from both writing row n. params is bytea, not jsonb, because
-- the hash is over its bytes exactly as they were given.
CREATE TABLE audit_log (
	seq           bigint      PRIMARY KEY,
	at            timestamptz NOT NULL,
	actor_kind    text        NOT NULL,
	actor_id      text        NOT NULL,
	actor_name    text        NOT NULL,
	role          text        NOT NULL,
	action        text        NOT NULL,
	target        text        NOT NULL,
	params        bytea,
	result        text        NOT NULL,
	reason        text        NOT NULL,
	second_factor text        NOT NULL,
	approver      text        NOT NULL,
	approval_id   bigint      NOT NULL,
	batch         bigint      NOT NULL,
	client_addr   text        NOT NULL,
	prev_hash     bytea,
	hash          bytea       NOT NULL
);

-- The filters of the console's and the API's audit views, each in seq order
-- so that a page is a range of the index. Most rows belong to no batch.
CREATE INDEX audit_log_actor_idx ON audit_log (actor_name, seq);
CREATE INDEX audit_log_action_idx ON audit_log (action, seq);
CREATE INDEX audit_log_target_idx ON audit_log (target, seq);
CREATE INDEX audit_log_batch_idx ON audit_log (batch, seq) WHERE batch <> 0;

-- The audit log's head: its one row holds the seq and hash of the last row
-- appended. An appender locks it (SELECT … FOR UPDATE) before it reads it,
-- so appenders take turns, and under READ COMMITTED the next one's locking
-- read returns the head as the previous one committed it. Locking the last
-- row of audit_log instead would not do: two appenders that both lock row n
-- would, one after the other, both chain a row n+1 onto it. Removing rows
-- from the log's end leaves the head behind, which AuditVerify reports.
CREATE TABLE audit_head (
	one  boolean PRIMARY KEY DEFAULT true CHECK (one),
	seq  bigint  NOT NULL,
	hash bytea
);

INSERT INTO audit_head (seq, hash) VALUES (0, NULL);

-- Manual closes: the selection as it was asked for, who asked, the approval
-- it needed (0 when none) and its counts as the closer last wrote them.
CREATE TABLE close_batches (
	id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	selector    bytea,
	reason      text        NOT NULL,
	created_by  text        NOT NULL,
	approval_id bigint      NOT NULL,
	created_at  timestamptz NOT NULL,
	status      text        NOT NULL,
	total       bigint      NOT NULL,
	closed      bigint      NOT NULL,
	skipped     bigint      NOT NULL,
	failed      bigint      NOT NULL,
	finished_at timestamptz
);

CREATE INDEX close_batches_status_idx ON close_batches (status, id);

-- The orders of a batch, frozen when it is made (up to 100k of them), so
-- that a confirmed close closes what was previewed and a re-run after a
-- crash carries on with those still pending. The closer pages through them
-- by order number, those of one status (pending) or all. Order numbers
-- compare bytewise (COLLATE "C"), as Go and SQLite compare them, so that
-- the order of the pages does not hang on the database's collation.
CREATE TABLE close_items (
	batch_id bigint NOT NULL REFERENCES close_batches (id),
	order_no text   NOT NULL COLLATE "C",
	status   text   NOT NULL,
	detail   text   NOT NULL,
	PRIMARY KEY (batch_id, order_no)
);

CREATE INDEX close_items_status_idx ON close_items (batch_id, status, order_no);
