-- Cards issued for paid membership orders: a count card when visits > 0,
-- otherwise a card that grants its product while active. Revoking voids a
-- card and records the visits it still had as deducted.
CREATE TABLE cards (
    id         INTEGER PRIMARY KEY,
    order_id   INTEGER NOT NULL REFERENCES orders (id),
    order_no   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    product    TEXT    NOT NULL,
    visits     INTEGER NOT NULL CHECK (visits >= 0),
    used       INTEGER NOT NULL DEFAULT 0 CHECK (used >= 0),
    deducted   INTEGER NOT NULL DEFAULT 0 CHECK (deducted >= 0),
    status     TEXT    NOT NULL,
    issued_at  INTEGER NOT NULL,
    revoked_at INTEGER,
    CHECK (visits = 0 OR used <= visits)
) STRICT;

CREATE INDEX cards_order_idx ON cards (order_id, id);
