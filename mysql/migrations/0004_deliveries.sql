-- Deliveries: one outbox event handed to one subscriber, created pending in
-- the transaction that writes the event. attempts counts every attempt ever
-- started and is the lease token; retry_base is attempts when an operator
-- last retried it. A claim sets next_attempt_at to lease_until, so that a
-- lease whose worker died makes the delivery due again.
--
-- order_id has no foreign key, as in the PostgreSQL store: event_id already
-- references the outbox row, which references the order, and the store
-- copies order_id from that very row.
--
-- MySQL has no partial indexes: the indexes of pending and of dead
-- deliveries lead with status, so that each backlog is one range of them.
CREATE TABLE deliveries (
    id              BIGINT          NOT NULL AUTO_INCREMENT,
    event_id        VARBINARY(1024) NOT NULL,
    order_id        BIGINT          NOT NULL,
    order_no        VARBINARY(1024) NOT NULL,
    event_type      VARBINARY(1024) NOT NULL,
    subscriber      VARBINARY(1024) NOT NULL,
    status          VARBINARY(1024) NOT NULL,
    attempts        INT             NOT NULL DEFAULT 0,
    retry_base      INT             NOT NULL DEFAULT 0,
    next_attempt_at BIGINT          NOT NULL,
    lease_owner     VARBINARY(1024) NOT NULL DEFAULT '',
    lease_until     BIGINT,
    `unknown`       BOOLEAN         NOT NULL DEFAULT FALSE,
    last_error      TEXT            NOT NULL DEFAULT (''),
    created_at      BIGINT          NOT NULL,
    updated_at      BIGINT          NOT NULL,
    done_at         BIGINT,
    PRIMARY KEY (id),
    CONSTRAINT deliveries_event_subscriber_key UNIQUE (event_id, subscriber),
    INDEX deliveries_due_idx (status, next_attempt_at),
    INDEX deliveries_order_idx (order_id, id),
    INDEX deliveries_dead_idx (status, updated_at),
    CONSTRAINT deliveries_event_fk FOREIGN KEY (event_id) REFERENCES outbox (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per finished attempt. An attempt whose worker died has none.
CREATE TABLE delivery_attempts (
    delivery_id BIGINT          NOT NULL,
    attempt     INT             NOT NULL,
    worker      VARBINARY(1024) NOT NULL DEFAULT '',
    started_at  BIGINT          NOT NULL,
    duration_us BIGINT          NOT NULL DEFAULT 0,
    outcome     VARBINARY(1024) NOT NULL DEFAULT '',
    error       TEXT            NOT NULL DEFAULT (''),
    PRIMARY KEY (delivery_id, attempt),
    CONSTRAINT delivery_attempts_delivery_fk FOREIGN KEY (delivery_id) REFERENCES deliveries (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Effects that local handlers applied, one row per consumer and event,
-- written in the transaction of the effect so that it happens once.
CREATE TABLE effects (
    consumer   VARBINARY(1024) NOT NULL,
    event_id   VARBINARY(1024) NOT NULL,
    created_at BIGINT          NOT NULL,
    PRIMARY KEY (consumer, event_id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
