-- The built-in stock ledger: one line per SKU. The checks are the ledger's
-- invariants. StockMove's guarded updates never reach them; StockSet relies
-- on stock_reserved_check to refuse an on-hand below what is reserved.
CREATE TABLE stock (
	sku        text        PRIMARY KEY,
	on_hand    bigint      NOT NULL CONSTRAINT stock_on_hand_check CHECK (on_hand >= 0),
	reserved   bigint      NOT NULL CONSTRAINT stock_reserved_check CHECK (reserved >= 0 AND reserved <= on_hand),
	updated_at timestamptz NOT NULL
);

-- The stock journal: one row per line of every move.
CREATE TABLE stock_moves (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	order_id   bigint      NOT NULL,
	sku        text        NOT NULL,
	qty        bigint      NOT NULL CHECK (qty > 0),
	kind       text        NOT NULL,
	created_at timestamptz NOT NULL
);

CREATE INDEX stock_moves_order_idx ON stock_moves (order_id, id);

-- The built-in coupon ledger. order_no (and order_id) name the order holding
-- or having used the coupon; '' (NULL) while it is available.
CREATE TABLE coupons (
	code       text        PRIMARY KEY,
	status     text        NOT NULL,
	order_no   text        NOT NULL DEFAULT '',
	order_id   bigint,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
);

-- The coupon journal: one row per move.
CREATE TABLE coupon_moves (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	code       text        NOT NULL,
	order_id   bigint,
	order_no   text        NOT NULL DEFAULT '',
	kind       text        NOT NULL,
	created_at timestamptz NOT NULL
);

CREATE INDEX coupon_moves_code_idx ON coupon_moves (code, id);
