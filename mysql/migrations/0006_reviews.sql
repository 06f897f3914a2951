-- Reviews: orders waiting for an operator because automation gave up on
-- them. delivery_id names the delivery that died, NULL when none did. The
-- open queue is the range of reviews_open_idx whose resolved_at is NULL.
CREATE TABLE reviews (
    id          BIGINT          NOT NULL AUTO_INCREMENT,
    order_id    BIGINT          NOT NULL,
    order_no    VARBINARY(1024) NOT NULL,
    reason      TEXT            NOT NULL,
    delivery_id BIGINT,
    created_at  BIGINT          NOT NULL,
    resolved_at BIGINT,
    PRIMARY KEY (id),
    INDEX reviews_order_idx (order_id),
    INDEX reviews_open_idx (resolved_at, created_at),
    CONSTRAINT reviews_order_fk FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
