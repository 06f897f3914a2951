-- The outbox: events written in the transaction of the change that caused
-- them. seq orders them for the relay; id is the event id consumers
-- deduplicate on. The payload is text, so that consumers receive the bytes
-- that were written (see orders' JSON columns).
CREATE TABLE outbox (
    seq        BIGINT          NOT NULL AUTO_INCREMENT,
    id         VARBINARY(1024) NOT NULL,
    order_id   BIGINT          NOT NULL,
    order_no   VARBINARY(1024) NOT NULL,
    type       VARBINARY(1024) NOT NULL,
    payload    MEDIUMTEXT      NOT NULL,
    created_at BIGINT          NOT NULL,
    PRIMARY KEY (seq),
    CONSTRAINT outbox_id_key UNIQUE (id),
    INDEX outbox_order_idx (order_id, seq),
    CONSTRAINT outbox_order_fk FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
