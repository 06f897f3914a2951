-- The transition log: one row per change of an order's state, and one for
-- its creation (from_state '').
CREATE TABLE transitions (
    id         INTEGER PRIMARY KEY,
    order_id   INTEGER NOT NULL REFERENCES orders (id),
    from_state TEXT    NOT NULL DEFAULT '',
    to_state   TEXT    NOT NULL,
    event      TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    fired_by   TEXT    NOT NULL DEFAULT '',
    actor      TEXT    NOT NULL DEFAULT '',
    reason     TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX transitions_order_idx ON transitions (order_id, id);
