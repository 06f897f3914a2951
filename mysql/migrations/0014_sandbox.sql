-- The state of the built-in sandbox payment gateway (payment.Sandbox), so
-- that every process on this database sees one gateway. Every row belongs to
-- a gateway, the sandbox's provider name. The gateway's rules live in package
-- payment; these tables hold what it decided.

-- One row per order the gateway was asked about, which its operations lock
-- before they read the order's payments.
CREATE TABLE sandbox_orders (
    gateway  VARBINARY(1024) NOT NULL,
    order_no VARBINARY(1024) NOT NULL,
    PRIMARY KEY (gateway, order_no)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Payments as the gateway sees them, by id in the order they were made, with
-- what was refunded of each and the body of the latest callback about it.
CREATE TABLE sandbox_payments (
    id       BIGINT          NOT NULL AUTO_INCREMENT,
    gateway  VARBINARY(1024) NOT NULL,
    txn_id   VARBINARY(1024) NOT NULL,
    order_no VARBINARY(1024) NOT NULL,
    status   VARBINARY(1024) NOT NULL,
    amount   BIGINT          NOT NULL,
    currency VARBINARY(1024) NOT NULL,
    merchant VARBINARY(1024) NOT NULL,
    paid_at  BIGINT,
    refunded BIGINT          NOT NULL,
    callback MEDIUMBLOB,
    PRIMARY KEY (id),
    CONSTRAINT sandbox_payments_txn_key UNIQUE (gateway, txn_id),
    CONSTRAINT sandbox_payments_amount_check CHECK (amount >= 0),
    CONSTRAINT sandbox_payments_refunded_check CHECK (refunded BETWEEN 0 AND amount),
    INDEX sandbox_payments_order_idx (gateway, order_no, id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Charges of stored payment methods, by idempotency key.
CREATE TABLE sandbox_charges (
    gateway  VARBINARY(1024) NOT NULL,
    `key`    VARBINARY(1024) NOT NULL,
    order_no VARBINARY(1024) NOT NULL,
    amount   BIGINT          NOT NULL,
    currency VARBINARY(1024) NOT NULL,
    method   VARBINARY(1024) NOT NULL,
    txn_id   VARBINARY(1024) NOT NULL,
    PRIMARY KEY (gateway, `key`)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Refunds, by id in the order they were made, under their idempotency keys.
CREATE TABLE sandbox_refunds (
    id        BIGINT          NOT NULL AUTO_INCREMENT,
    gateway   VARBINARY(1024) NOT NULL,
    `key`     VARBINARY(1024) NOT NULL,
    txn_id    VARBINARY(1024) NOT NULL,
    order_no  VARBINARY(1024) NOT NULL,
    amount    BIGINT          NOT NULL,
    currency  VARBINARY(1024) NOT NULL,
    reason    TEXT            NOT NULL,
    refund_id VARBINARY(1024) NOT NULL,
    status    VARBINARY(1024) NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT sandbox_refunds_key_key UNIQUE (gateway, `key`),
    CONSTRAINT sandbox_refunds_amount_check CHECK (amount > 0)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The secret that signs a gateway's callbacks and requests, kept for the
-- processes started without one of their own.
CREATE TABLE sandbox_gateways (
    gateway VARBINARY(1024) NOT NULL,
    secret  BLOB            NOT NULL,
    PRIMARY KEY (gateway)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
