-- Cards issued for paid membership orders: a count card when visits > 0,
-- otherwise a card that grants its product while active. Revoking voids a
-- card and records the visits it still had as deducted.
CREATE TABLE cards (
	id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	order_id   bigint      NOT NULL REFERENCES orders (id),
	order_no   text        NOT NULL,
	user_id    text        NOT NULL,
	product    text        NOT NULL,
	visits     int         NOT NULL CHECK (visits >= 0),
	used       int         NOT NULL DEFAULT 0 CHECK (used >= 0),
	deducted   int         NOT NULL DEFAULT 0 CHECK (deducted >= 0),
	status     text        NOT NULL,
	issued_at  timestamptz NOT NULL,
	revoked_at timestamptz,
	CONSTRAINT cards_visits_left_check CHECK (visits = 0 OR used <= visits)
);

CREATE INDEX cards_order_idx ON cards (order_id, id);
