-- Orders: the single source of truth of every order's state. Times are unix
-- microseconds, UTC. Short strings are VARBINARY, compared byte for byte
-- (utf8mb4_bin would pad: 'a' = 'a '), of up to 1024 bytes: more than
-- anything above the store lets through, and what a provider's ids need;
-- ROW_FORMAT = DYNAMIC lets indexes hold keys that long whatever the
-- server's default row format. Free text is utf8mb4. JSON columns
-- are text, so that the caller's bytes come back exactly as sent (MySQL's
-- JSON type rewrites them), and unchecked: the documents are checked before
-- they reach the store, and MariaDB's json_valid refuses valid ones nested
-- deeper than 32.
--
-- The durable timer is orders_due_idx. MySQL has no partial indexes, so it
-- holds every order, those without a deadline (NULL, at its start) too.
-- (deadline_at, id) is the deadline list's order and flow rides along, so
-- that the next-deadline query reads the index alone.
CREATE TABLE orders (
    id           BIGINT          NOT NULL AUTO_INCREMENT,
    order_no     VARBINARY(1024) NOT NULL,
    flow         VARBINARY(1024) NOT NULL,
    state        VARBINARY(1024) NOT NULL,
    deadline_at  BIGINT,
    amount       BIGINT          NOT NULL,
    currency     VARBINARY(1024) NOT NULL,
    user_id      VARBINARY(1024) NOT NULL,
    items        MEDIUMTEXT,
    coupon       VARBINARY(1024) NOT NULL DEFAULT '',
    metadata     MEDIUMTEXT,
    version      BIGINT          NOT NULL,
    created_at   BIGINT          NOT NULL,
    updated_at   BIGINT          NOT NULL,
    closed_at    BIGINT,
    close_reason VARBINARY(1024) NOT NULL DEFAULT '',
    fired_by     VARBINARY(1024) NOT NULL DEFAULT '',
    request_hash VARBINARY(1024) NOT NULL DEFAULT '',
    PRIMARY KEY (id),
    CONSTRAINT orders_order_no_key UNIQUE (order_no),
    INDEX orders_due_idx (deadline_at, id, flow),
    -- Newest-first listings, read backwards, keyset-paged on (created_at, id).
    INDEX orders_created_idx (created_at, id),
    INDEX orders_user_idx (user_id, created_at, id),
    INDEX orders_state_idx (state, created_at, id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
