-- Payments: one row per provider transaction, whatever became of it. A
-- payment is applied (it paid its order), late (to be refunded), refunding,
-- refunded, or in review; the payment path moves it, guarded by its status.
CREATE TABLE payments (
    id          INTEGER PRIMARY KEY,
    provider    TEXT    NOT NULL,
    txn_id      TEXT    NOT NULL,
    order_id    INTEGER NOT NULL REFERENCES orders (id),
    order_no    TEXT    NOT NULL,
    amount      INTEGER NOT NULL CHECK (amount > 0),
    currency    TEXT    NOT NULL,
    merchant    TEXT    NOT NULL DEFAULT '',
    paid_at     INTEGER NOT NULL,
    status      TEXT    NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    refund_id   TEXT    NOT NULL DEFAULT '',
    refunded_at INTEGER,
    raw         BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (provider, txn_id)
) STRICT;

CREATE INDEX payments_order_idx ON payments (order_id, id);
-- Payments not yet settled (late, refunding, review) are few; reconcile and
-- the console read them from here.
CREATE INDEX payments_open_idx ON payments (id) WHERE status NOT IN ('applied', 'refunded');
