-- Merchant refunds of paid orders, each through the provider of the payment
-- that paid the order, under its own idempotency key.
CREATE TABLE order_refunds (
    id         BIGINT          NOT NULL AUTO_INCREMENT,
    order_id   BIGINT          NOT NULL,
    order_no   VARBINARY(1024) NOT NULL,
    payment_id BIGINT          NOT NULL,
    provider   VARBINARY(1024) NOT NULL,
    txn_id     VARBINARY(1024) NOT NULL,
    amount     BIGINT          NOT NULL,
    currency   VARBINARY(1024) NOT NULL,
    reason     TEXT            NOT NULL DEFAULT (''),
    `key`      VARBINARY(1024) NOT NULL,
    status     VARBINARY(1024) NOT NULL,
    refund_id  VARBINARY(1024) NOT NULL DEFAULT '',
    created_at BIGINT          NOT NULL,
    updated_at BIGINT          NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT order_refunds_key_key UNIQUE (`key`),
    CONSTRAINT order_refunds_amount_check CHECK (amount > 0),
    INDEX order_refunds_order_idx (order_id, id),
    CONSTRAINT order_refunds_order_fk FOREIGN KEY (order_id) REFERENCES orders (id),
    CONSTRAINT order_refunds_payment_fk FOREIGN KEY (payment_id) REFERENCES payments (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
