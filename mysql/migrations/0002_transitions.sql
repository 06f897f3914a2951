-- The transition log: one row per state change, written in the change's
-- transaction, and one for the order's creation (from_state '').
CREATE TABLE transitions (
    id         BIGINT          NOT NULL AUTO_INCREMENT,
    order_id   BIGINT          NOT NULL,
    from_state VARBINARY(1024) NOT NULL DEFAULT '',
    to_state   VARBINARY(1024) NOT NULL,
    event      VARBINARY(1024) NOT NULL,
    version    BIGINT          NOT NULL,
    fired_by   VARBINARY(1024) NOT NULL DEFAULT '',
    actor      TEXT            NOT NULL DEFAULT (''),
    reason     TEXT            NOT NULL DEFAULT (''),
    created_at BIGINT          NOT NULL,
    PRIMARY KEY (id),
    INDEX transitions_order_idx (order_id, id),
    CONSTRAINT transitions_order_fk FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
