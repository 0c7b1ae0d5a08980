"""Tables of the PostgreSQL source tests: every type the JDBC source reads (tests/
test_jdbc_source.py), also read through a Spark Connect server and described by the client-held
connection (tests/test_connect.py, tests/test_jdbc_pg_client.py)."""

TYPED = """
DROP TABLE IF EXISTS typed;
CREATE TABLE typed (
  region text NOT NULL, id int NOT NULL,
  amount numeric(12,3), ratio double precision, big bigint,
  note text, data bytea, ts timestamp, tstz timestamptz, day date, flag boolean,
  uid uuid, doc json, docb jsonb, tags text[], nums int[],
  PRIMARY KEY (region, id)
);
INSERT INTO typed VALUES
 ('eu', 1, 1234.5, 0.25, 9007199254740993, E'Zürich ☃ 😀\\nline two\\r\\n"three", ''four''',
  '\\x00ff10'::bytea, '2026-11-23 07:35:00.123456', '2026-11-23 07:35:00.123456+02',
  '2026-11-23', true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2]}',
  '{"b": "ü"}', ARRAY['x', 'y,z', NULL], ARRAY[1, 2]),
 ('us', 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 ('eu', 2, -0.001, -0.0, -1, '', '\\x'::bytea, '1970-01-01 00:00:00', '1969-12-31 23:59:59.999999+00',
  '0001-01-01', false, '00000000-0000-0000-0000-000000000000', 'null', '[]', ARRAY[]::text[],
  ARRAY[NULL]::int[]);
"""

WIDE = """
DROP TABLE IF EXISTS wide;
CREATE TABLE wide (id int PRIMARY KEY, n50 numeric(50,10), nu numeric, n12 numeric(12,3),
                   neg numeric(5,-2), tiny numeric(3,5), arr numeric[]);
INSERT INTO wide VALUES
 (1, 1.5, 1e-24, 1.5, 12300, 0.00123, ARRAY[1.5, 1e-24]),
 (2, 12345.6789012345, pi(), -0.001, -99900, -0.00999, ARRAY[NULL, -2]::numeric[]),
 (3, -1e-10, 'NaN', NULL, NULL, NULL, NULL),
 (4, 123456789012345678901234567890123456789.0123456789, 123456789012345678901234567890.123456, 0, 0, 0,
  ARRAY[]::numeric[]),
 (5, NULL, NULL, 999999999.999, 9999900, 0.00001, ARRAY[ARRAY[1, 2], ARRAY[3, 4]]);
"""

KINDS = """
DROP TABLE IF EXISTS kinds; DROP TYPE IF EXISTS mood;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE kinds (id int PRIMARY KEY, m money, ts timestamp, tstz timestamptz, t time, tz timetz,
  iv interval, ia int[], i2 int[][], ta text[], na numeric(10,2)[], ea mood[], tsa timestamp[],
  j json, jb jsonb, b bytea, u uuid, e mood, bits bit(3), d date, c char(4));
INSERT INTO kinds VALUES
 (1, '1234.56', '2026-11-23 07:35:00.123456', '2026-11-23 07:35:00.123456+02', '23:59:59.999999',
  '12:00:00.5+05:30', '1 year 2 mons 3 days 04:05:06.7', ARRAY[1, NULL], ARRAY[[1, 2], [3, 4]],
  ARRAY['x', 'y,z', NULL, ''], ARRAY[1.5, -0.01], ARRAY['ok', 'sad']::mood[],
  ARRAY['2026-01-01 00:00:00.000001'::timestamp, '0100-02-28 23:00'], '{"a": 1.50,  "b": [1, 2]}',
  '{"a": 1.50,  "b": "ü"}', '\\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'happy', B'101',
  '0044-03-15 BC', 'ab'),
 (2, '-0.01', '0001-01-01 00:00:00', '1969-12-31 23:59:59.999999+00', '24:00:00', '00:00:00-12',
  '-1 days -00:00:00.000001', ARRAY[]::int[], NULL, NULL, NULL, ARRAY[]::mood[], NULL, 'null', '[]',
  '\\x', '00000000-0000-0000-0000-000000000000', 'sad', B'000', '1582-10-04', ''),
 (3, NULL, '1582-10-15 12:00:00', '12000-01-01 00:00:00+00', '00:00:00', NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '12000-01-01', NULL);
"""
