-- Each visit counted on a card, with the idempotency key the caller counted
-- it under (none when key is null) and the card's used count once it was
-- counted: a retry of the call under the same key finds its visit, counts
-- nothing and answers with the card as that visit left it. Visits counted
-- before this table have no rows.
CREATE TABLE card_visits (
	id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	card_id    bigint      NOT NULL REFERENCES cards (id),
	key        text,
	used       int         NOT NULL CHECK (used > 0),
	visited_at timestamptz NOT NULL,
	CONSTRAINT card_visits_key_key UNIQUE (key)
);

CREATE INDEX card_visits_card_idx ON card_visits (card_id, id);
