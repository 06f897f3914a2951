-- Each visit counted on a card, with the idempotency key the caller counted
-- it under (none when key is null) and the card's used count once it was
-- counted: a retry of the call under the same key finds its visit, counts
-- nothing and answers with the card as that visit left it. Visits counted
-- before this table have no rows.
CREATE TABLE card_visits (
    id         BIGINT         NOT NULL AUTO_INCREMENT,
    card_id    BIGINT         NOT NULL,
    `key`      VARBINARY(255),
    used       INT            NOT NULL,
    visited_at BIGINT         NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT card_visits_key_key UNIQUE (`key`),
    CONSTRAINT card_visits_used_check CHECK (used > 0),
    INDEX card_visits_card_idx (card_id, id),
    CONSTRAINT card_visits_card_fk FOREIGN KEY (card_id) REFERENCES cards (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
