-- Payments held without an order: a verified callback reported a capture
-- for an order number Lapse does not have (it may have overtaken the
-- order's creation). One row per provider transaction. The engine's matcher
-- applies a held one through the payment path once its order exists, or
-- puts it in review after its window; an operator refunds or dismisses one
-- in review. payments.order_id is NOT NULL, so they wait here. The matcher
-- reads those held or refunding, the desk those in review, by status.
CREATE TABLE held_payments (
    id         BIGINT          NOT NULL AUTO_INCREMENT,
    provider   VARBINARY(1024) NOT NULL,
    txn_id     VARBINARY(1024) NOT NULL,
    order_no   VARBINARY(1024) NOT NULL,
    amount     BIGINT          NOT NULL,
    currency   VARBINARY(1024) NOT NULL,
    merchant   VARBINARY(1024) NOT NULL DEFAULT '',
    paid_at    BIGINT          NOT NULL,
    doubt      TEXT            NOT NULL DEFAULT (''),
    status     VARBINARY(1024) NOT NULL,
    reason     TEXT            NOT NULL DEFAULT (''),
    refund_id  VARBINARY(1024) NOT NULL DEFAULT '',
    by_whom    VARBINARY(1024) NOT NULL DEFAULT '',
    note       TEXT            NOT NULL DEFAULT (''),
    raw        MEDIUMBLOB      NOT NULL,
    created_at BIGINT          NOT NULL,
    updated_at BIGINT          NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT held_payments_provider_txn_key UNIQUE (provider, txn_id),
    CONSTRAINT held_payments_amount_check CHECK (amount > 0),
    INDEX held_payments_status_idx (status, id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
