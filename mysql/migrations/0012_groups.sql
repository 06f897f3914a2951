-- Members of group buys: a group is an order, and each member is charged the
-- group's price through the provider port, under the member's own
-- idempotency key, once the group closes. A user joins a group once.
CREATE TABLE group_members (
    id         BIGINT          NOT NULL AUTO_INCREMENT,
    order_id   BIGINT          NOT NULL,
    group_id   VARBINARY(1024) NOT NULL,
    user_id    VARBINARY(1024) NOT NULL,
    provider   VARBINARY(1024) NOT NULL,
    method     VARBINARY(1024) NOT NULL,
    amount     BIGINT          NOT NULL,
    currency   VARBINARY(1024) NOT NULL,
    `key`      VARBINARY(1024) NOT NULL,
    status     VARBINARY(1024) NOT NULL,
    attempts   INT             NOT NULL DEFAULT 0,
    txn_id     VARBINARY(1024) NOT NULL DEFAULT '',
    last_error TEXT            NOT NULL DEFAULT (''),
    joined_at  BIGINT          NOT NULL,
    updated_at BIGINT          NOT NULL,
    charged_at BIGINT,
    PRIMARY KEY (id),
    CONSTRAINT group_members_key_key UNIQUE (`key`),
    CONSTRAINT group_members_order_user_key UNIQUE (order_id, user_id),
    CONSTRAINT group_members_amount_check CHECK (amount > 0),
    INDEX group_members_order_idx (order_id, id),
    CONSTRAINT group_members_order_fk FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
