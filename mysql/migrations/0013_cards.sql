-- Cards issued for paid membership orders: a count card when visits > 0,
-- otherwise a card that grants its product while active. Revoking voids a
-- card and records the visits it still had as deducted.
CREATE TABLE cards (
    id         BIGINT          NOT NULL AUTO_INCREMENT,
    order_id   BIGINT          NOT NULL,
    order_no   VARBINARY(1024) NOT NULL,
    user_id    VARBINARY(1024) NOT NULL,
    product    VARBINARY(1024) NOT NULL,
    visits     INT             NOT NULL,
    used       INT             NOT NULL DEFAULT 0,
    deducted   INT             NOT NULL DEFAULT 0,
    status     VARBINARY(1024) NOT NULL,
    issued_at  BIGINT          NOT NULL,
    revoked_at BIGINT,
    PRIMARY KEY (id),
    CONSTRAINT cards_visits_check CHECK (visits >= 0),
    CONSTRAINT cards_used_check CHECK (used >= 0),
    CONSTRAINT cards_deducted_check CHECK (deducted >= 0),
    CONSTRAINT cards_visits_left_check CHECK (visits = 0 OR used <= visits),
    INDEX cards_order_idx (order_id, id),
    CONSTRAINT cards_order_fk FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
