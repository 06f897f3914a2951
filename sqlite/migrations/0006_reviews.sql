-- Reviews: orders waiting for an operator because automation gave up on
-- them. delivery_id names the delivery that died, NULL when none did.
CREATE TABLE reviews (
    id          INTEGER PRIMARY KEY,
    order_id    INTEGER NOT NULL REFERENCES orders (id),
    order_no    TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    delivery_id INTEGER,
    created_at  INTEGER NOT NULL,
    resolved_at INTEGER
) STRICT;

CREATE INDEX reviews_order_idx ON reviews (order_id);
-- The open queue, newest first; it shrinks as reviews are resolved.
CREATE INDEX reviews_open_idx ON reviews (created_at) WHERE resolved_at IS NULL;
