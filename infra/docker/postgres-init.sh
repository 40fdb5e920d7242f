#!/bin/sh
# First start of the stack's PostgreSQL (docker-entrypoint-initdb.d, as the superuser
# `kernelwatch`): the roles with their passwords, read from the secret files named by
# *_PASSWORD_FILE, and the Prefect server's database, owned by a role of its own (not the
# superuser). Migration 0002 finds the kernelwatch roles here and only grants them their
# rights. Only those roles may connect to the kernelwatch database, and only Prefect's role
# to Prefect's. Safe to run again: what exists is kept, passwords are set anew.
set -eu
secret() { cat "$1"; }
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v db="$POSTGRES_DB" \
    -v reader_password="$(secret "$KERNELWATCH_READER_PASSWORD_FILE")" \
    -v writer_password="$(secret "$KERNELWATCH_WRITER_PASSWORD_FILE")" \
    -v prefect_password="$(secret "$PREFECT_DB_PASSWORD_FILE")" <<'SQL'
SELECT format('CREATE ROLE %I', name) FROM unnest(ARRAY[
    'kernelwatch_reader', 'kernelwatch_writer', 'prefect']) AS name
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = name) \gexec
ALTER ROLE kernelwatch_reader LOGIN PASSWORD :'reader_password';
ALTER ROLE kernelwatch_writer LOGIN PASSWORD :'writer_password';
ALTER ROLE prefect LOGIN PASSWORD :'prefect_password' NOSUPERUSER NOCREATEDB NOCREATEROLE;
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"db" TO kernelwatch_reader, kernelwatch_writer;
SELECT 'CREATE DATABASE prefect OWNER prefect'
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'prefect') \gexec
REVOKE ALL ON DATABASE prefect FROM PUBLIC;
SQL
