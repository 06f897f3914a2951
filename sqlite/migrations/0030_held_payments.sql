-- Payments held without an order: a verified callback reported a capture
-- for an order number Lapse does not have (it may have overtaken the
-- order's creation). One row per provider transaction. The engine's matcher
-- applies a held one through the payment path once its order exists, or
-- puts it in review after its window; an operator refunds or dismisses one
-- in review. payments.order_id is NOT NULL, so they wait here.
CREATE TABLE held_payments (
    id          INTEGER PRIMARY KEY,
    provider    TEXT    NOT NULL,
    txn_id      TEXT    NOT NULL,
    order_no    TEXT    NOT NULL,
    amount      INTEGER NOT NULL CHECK (amount > 0),
    currency    TEXT    NOT NULL,
    merchant    TEXT    NOT NULL DEFAULT '',
    paid_at     INTEGER NOT NULL,
    doubt       TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    refund_id   TEXT    NOT NULL DEFAULT '',
    by_whom     TEXT    NOT NULL DEFAULT '',
    note        TEXT    NOT NULL DEFAULT '',
    raw         BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (provider, txn_id)
) STRICT;

-- The matcher reads those held or refunding; the desk those in review.
CREATE INDEX held_payments_status_idx ON held_payments (status, id);
