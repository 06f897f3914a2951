-- The salt of the idempotency keys of group members' charges: drawn at
-- random by the first process that derives a key, and kept, so that two
-- databases sharing one provider account (two deployments) never derive the
-- same key for the same group and user. One row. A member keeps the key it
-- was given at its join, so keys made before the salt are not changed.
CREATE TABLE charge_salt (
    id   INT             NOT NULL,
    salt VARBINARY(1024) NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT charge_salt_one CHECK (id = 1),
    CONSTRAINT charge_salt_salt_check CHECK (salt <> '')
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
