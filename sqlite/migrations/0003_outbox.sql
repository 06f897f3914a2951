-- The outbox: events written in the transaction of the change that caused
-- them. AUTOINCREMENT keeps seq from ever being reused, even after the newest
-- rows are deleted, so a relay's position (the last seq it handed on) stays
-- valid.
CREATE TABLE outbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL UNIQUE,
    order_id   INTEGER NOT NULL REFERENCES orders (id),
    order_no   TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX outbox_order_idx ON outbox (order_id, seq);
