-- Merchant refunds of paid orders, each through the provider of the payment
-- that paid the order, under its own idempotency key.
CREATE TABLE order_refunds (
    id         INTEGER PRIMARY KEY,
    order_id   INTEGER NOT NULL REFERENCES orders (id),
    order_no   TEXT    NOT NULL,
    payment_id INTEGER NOT NULL REFERENCES payments (id),
    provider   TEXT    NOT NULL,
    txn_id     TEXT    NOT NULL,
    amount     INTEGER NOT NULL CHECK (amount > 0),
    currency   TEXT    NOT NULL,
    reason     TEXT    NOT NULL DEFAULT '',
    key        TEXT    NOT NULL UNIQUE,
    status     TEXT    NOT NULL,
    refund_id  TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

CREATE INDEX order_refunds_order_idx ON order_refunds (order_id, id);
