-- Payments: one row per provider transaction, whatever became of it. A
-- payment is applied (it paid its order), late (to be refunded), refunding,
-- refunded, or in review; the payment path moves it, guarded by its status.
-- Those not yet settled (late, refunding, review) are few; reconcile and the
-- console read them by status from payments_open_idx.
CREATE TABLE payments (
    id          BIGINT          NOT NULL AUTO_INCREMENT,
    provider    VARBINARY(1024) NOT NULL,
    txn_id      VARBINARY(1024) NOT NULL,
    order_id    BIGINT          NOT NULL,
    order_no    VARBINARY(1024) NOT NULL,
    amount      BIGINT          NOT NULL,
    currency    VARBINARY(1024) NOT NULL,
    merchant    VARBINARY(1024) NOT NULL DEFAULT '',
    paid_at     BIGINT          NOT NULL,
    status      VARBINARY(1024) NOT NULL,
    reason      TEXT            NOT NULL DEFAULT (''),
    refund_id   VARBINARY(1024) NOT NULL DEFAULT '',
    refunded_at BIGINT,
    raw         MEDIUMBLOB      NOT NULL,
    created_at  BIGINT          NOT NULL,
    updated_at  BIGINT          NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT payments_provider_txn_key UNIQUE (provider, txn_id),
    CONSTRAINT payments_amount_check CHECK (amount > 0),
    INDEX payments_order_idx (order_id, id),
    INDEX payments_open_idx (status, id),
    CONSTRAINT payments_order_fk FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
