-- The state of the built-in sandbox payment gateway (payment.Sandbox), so
-- that every process on this database sees one gateway. Every row belongs to
-- a gateway, the sandbox's provider name. The gateway's rules live in package
-- payment; these tables hold what it decided. Its operations lock nothing
-- finer than their transaction: SQLite has one writer.

-- Payments as the gateway sees them, by id in the order they were made, with
-- what was refunded of each and the body of the latest callback about it.
CREATE TABLE sandbox_payments (
    id       INTEGER PRIMARY KEY,
    gateway  TEXT    NOT NULL,
    txn_id   TEXT    NOT NULL,
    order_no TEXT    NOT NULL,
    status   TEXT    NOT NULL,
    amount   INTEGER NOT NULL CHECK (amount >= 0),
    currency TEXT    NOT NULL,
    merchant TEXT    NOT NULL,
    paid_at  INTEGER,
    refunded INTEGER NOT NULL,
    callback BLOB,
    UNIQUE (gateway, txn_id),
    CHECK (refunded BETWEEN 0 AND amount)
) STRICT;

CREATE INDEX sandbox_payments_order_idx ON sandbox_payments (gateway, order_no, id);

-- Charges of stored payment methods, by idempotency key.
CREATE TABLE sandbox_charges (
    gateway  TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    order_no TEXT    NOT NULL,
    amount   INTEGER NOT NULL,
    currency TEXT    NOT NULL,
    method   TEXT    NOT NULL,
    txn_id   TEXT    NOT NULL,
    PRIMARY KEY (gateway, key)
) STRICT;

-- Refunds, by id in the order they were made, under their idempotency keys.
CREATE TABLE sandbox_refunds (
    id        INTEGER PRIMARY KEY,
    gateway   TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    txn_id    TEXT    NOT NULL,
    order_no  TEXT    NOT NULL,
    amount    INTEGER NOT NULL CHECK (amount > 0),
    currency  TEXT    NOT NULL,
    reason    TEXT    NOT NULL,
    refund_id TEXT    NOT NULL,
    status    TEXT    NOT NULL,
    UNIQUE (gateway, key)
) STRICT;

-- The secret that signs a gateway's callbacks and requests, kept for the
-- processes started without one of their own.
CREATE TABLE sandbox_gateways (
    gateway TEXT PRIMARY KEY,
    secret  BLOB NOT NULL
) STRICT;
