-- What operators' risky actions put at stake on their own word, carried out
-- without a second operator's approval (lapse.Stake): the orders of a
-- manual close, the members of a group buy cancelled while open. The access
-- service sums an operator's rows over its window (24 hours) and holds an
-- action for approval once the sum would pass the threshold, so that an
-- operator cannot go past it in pieces. Rows are only appended.
CREATE TABLE operator_stakes (
	id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	operator_id bigint      NOT NULL REFERENCES operators (id),
	action      text        NOT NULL,
	target      text        NOT NULL,
	count       bigint      NOT NULL,
	at          timestamptz NOT NULL
);

CREATE INDEX operator_stakes_operator_idx ON operator_stakes (operator_id, at);
