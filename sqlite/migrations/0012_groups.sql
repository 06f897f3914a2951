-- Members of group buys: a group is an order, and each member is charged the
-- group's price through the provider port, under the member's own
-- idempotency key, once the group closes. A user joins a group once.
CREATE TABLE group_members (
    id         INTEGER PRIMARY KEY,
    order_id   INTEGER NOT NULL REFERENCES orders (id),
    group_id   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    provider   TEXT    NOT NULL,
    method     TEXT    NOT NULL,
    amount     INTEGER NOT NULL CHECK (amount > 0),
    currency   TEXT    NOT NULL,
    key        TEXT    NOT NULL UNIQUE,
    status     TEXT    NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    txn_id     TEXT    NOT NULL DEFAULT '',
    last_error TEXT    NOT NULL DEFAULT '',
    joined_at  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    charged_at INTEGER,
    UNIQUE (order_id, user_id)
) STRICT;

CREATE INDEX group_members_order_idx ON group_members (order_id, id);
