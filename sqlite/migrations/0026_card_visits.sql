-- Each visit counted on a card, with the idempotency key the caller counted
-- it under (none when key is null) and the card's used count once it was
-- counted: a retry of the call under the same key finds its visit, counts
-- nothing and answers with the card as that visit left it. Visits counted
-- before this table have no rows.
CREATE TABLE card_visits (
    id         INTEGER PRIMARY KEY,
    card_id    INTEGER NOT NULL REFERENCES cards (id),
    key        TEXT    UNIQUE,
    used       INTEGER NOT NULL CHECK (used > 0),
    visited_at INTEGER NOT NULL
) STRICT;

CREATE INDEX card_visits_card_idx ON card_visits (card_id, id);
