-- The salt of the idempotency keys of group members' charges: drawn at
-- random by the first process that derives a key, and kept, so that two
-- databases sharing one provider account (two deployments) never derive the
-- same key for the same group and user. One row. A member keeps the key it
-- was given at its join, so keys made before the salt are not changed.
CREATE TABLE charge_salt (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    salt TEXT    NOT NULL CHECK (salt <> '')
) STRICT;
