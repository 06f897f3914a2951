-- The built-in stock ledger: one line per SKU. The checks are the ledger's
-- invariants; the store's guarded updates never reach them, so a violation
-- is a bug that fails its transaction.
CREATE TABLE stock (
    sku        TEXT    NOT NULL PRIMARY KEY,
    on_hand    INTEGER NOT NULL CHECK (on_hand >= 0),
    reserved   INTEGER NOT NULL CHECK (reserved >= 0 AND reserved <= on_hand),
    updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- The stock journal: one row per line of every move.
CREATE TABLE stock_moves (
    id         INTEGER PRIMARY KEY,
    order_id   INTEGER NOT NULL,
    sku        TEXT    NOT NULL,
    qty        INTEGER NOT NULL CHECK (qty > 0),
    kind       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX stock_moves_order_idx ON stock_moves (order_id, id);

-- The built-in coupon ledger. order_no (and order_id) name the order holding
-- or having used the coupon; '' (NULL) while it is available.
CREATE TABLE coupons (
    code       TEXT    NOT NULL PRIMARY KEY,
    status     TEXT    NOT NULL,
    order_no   TEXT    NOT NULL DEFAULT '',
    order_id   INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- The coupon journal: one row per move.
CREATE TABLE coupon_moves (
    id         INTEGER PRIMARY KEY,
    code       TEXT    NOT NULL,
    order_id   INTEGER,
    order_no   TEXT    NOT NULL DEFAULT '',
    kind       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX coupon_moves_code_idx ON coupon_moves (code, id);
