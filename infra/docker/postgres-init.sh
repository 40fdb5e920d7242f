#!/bin/sh
# First start of the stack's PostgreSQL (docker-entrypoint-initdb.d): a database for the
# Prefect server's state, and the two kernelwatch roles with passwords. Migration 0002 finds
# the roles there and only grants them their rights.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v reader_password="$KERNELWATCH_READER_PASSWORD" \
    -v writer_password="$KERNELWATCH_WRITER_PASSWORD" <<'SQL'
CREATE DATABASE prefect;
CREATE ROLE kernelwatch_reader LOGIN PASSWORD :'reader_password';
CREATE ROLE kernelwatch_writer LOGIN PASSWORD :'writer_password';
SQL
