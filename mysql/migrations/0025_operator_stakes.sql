-- What operators' risky actions put at stake on their own word, carried out
-- without a second operator's approval (lapse.Stake): the orders of a
-- manual close, the members of a group buy cancelled while open. The access
-- service sums an operator's rows over its window (24 hours) and holds an
-- action for approval once the sum would pass the threshold, so that an
-- operator cannot go past it in pieces. Rows are only appended.
CREATE TABLE operator_stakes (
    id          BIGINT          NOT NULL AUTO_INCREMENT,
    operator_id BIGINT          NOT NULL,
    action      VARBINARY(1024) NOT NULL,
    target      VARBINARY(1024) NOT NULL,
    order_count BIGINT          NOT NULL,
    at          BIGINT          NOT NULL,
    PRIMARY KEY (id),
    INDEX operator_stakes_operator_idx (operator_id, at),
    CONSTRAINT operator_stakes_operator_fk FOREIGN KEY (operator_id) REFERENCES operators (id)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
