-- The built-in stock ledger: one line per SKU. The checks are the ledger's
-- invariants. StockMove's guarded updates never reach them; StockSet relies
-- on stock_reserved_check to refuse an on-hand below what is reserved.
CREATE TABLE stock (
    sku        VARBINARY(1024) NOT NULL,
    on_hand    BIGINT          NOT NULL,
    reserved   BIGINT          NOT NULL,
    updated_at BIGINT          NOT NULL,
    PRIMARY KEY (sku),
    CONSTRAINT stock_on_hand_check CHECK (on_hand >= 0),
    CONSTRAINT stock_reserved_check CHECK (reserved >= 0 AND reserved <= on_hand)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The stock journal: one row per line of every move.
CREATE TABLE stock_moves (
    id         BIGINT          NOT NULL AUTO_INCREMENT,
    order_id   BIGINT          NOT NULL,
    sku        VARBINARY(1024) NOT NULL,
    qty        BIGINT          NOT NULL,
    kind       VARBINARY(1024) NOT NULL,
    created_at BIGINT          NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT stock_moves_qty_check CHECK (qty > 0),
    INDEX stock_moves_order_idx (order_id, id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The built-in coupon ledger. order_no (and order_id) name the order holding
-- or having used the coupon; '' (NULL) while it is available.
CREATE TABLE coupons (
    code       VARBINARY(1024) NOT NULL,
    status     VARBINARY(1024) NOT NULL,
    order_no   VARBINARY(1024) NOT NULL DEFAULT '',
    order_id   BIGINT,
    created_at BIGINT          NOT NULL,
    updated_at BIGINT          NOT NULL,
    PRIMARY KEY (code)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The coupon journal: one row per move.
CREATE TABLE coupon_moves (
    id         BIGINT          NOT NULL AUTO_INCREMENT,
    code       VARBINARY(1024) NOT NULL,
    order_id   BIGINT,
    order_no   VARBINARY(1024) NOT NULL DEFAULT '',
    kind       VARBINARY(1024) NOT NULL,
    created_at BIGINT          NOT NULL,
    PRIMARY KEY (id),
    INDEX coupon_moves_code_idx (code, id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
