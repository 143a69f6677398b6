//! The embedded SQLite database (OPS-2): connection pool in WAL mode, embedded migrations, and
//! the single-process lock (OPS-1).

use std::{fs::File, os::unix::fs::PermissionsExt as _, path::PathBuf, str::FromStr, time::Duration};

use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("invalid database URL {url}: {source}")]
    Url { url: String, source: sqlx::Error },
    #[error(
        "another SubLane process is already using the database {db} (lock {lock} is held). \
         Only one process may serve a database (OPS-1): stop the other one first."
    )]
    Locked { db: String, lock: String },
    #[error("cannot create or lock {path}: {source}")]
    LockFile { path: String, source: std::io::Error },
    #[error("cannot open the database: {0}")]
    Open(sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(sqlx::migrate::MigrateError),
}

/// Holds the exclusive lock on a database for as long as it lives.
#[derive(Debug)]
pub struct ProcessLock {
    _file: Option<File>,
}

/// Splits `rows` for multi-row statements: chunks of `most` rows (a power of two), then the rest
/// in powers of two, largest first. A batch of any length then takes one of a few statement
/// shapes (eight for 128), each parsed once and kept in the connection's statement cache. A rest
/// of any length as one chunk was a statement of a new shape nearly every batch, parsed afresh:
/// under callgrind, about 850k instructions for one of 128 rows of 18 parameters. The price is
/// a few more statements per batch (at most six more for 128).
pub fn statement_sized<T>(mut rows: &[T], most: usize) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        let n = rows.len().min(most);
        if n == 0 {
            return None;
        }
        let (chunk, rest) = rows.split_at(1 << n.ilog2());
        rows = rest;
        Some(chunk)
    })
}

/// Opens (creating if needed) and migrates the database, after taking its process lock.
pub async fn open(url: &str) -> Result<(SqlitePool, ProcessLock), DbError> {
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|source| DbError::Url { url: url.to_owned(), source })?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(5));
    let file = options.get_filename().to_path_buf();
    let lock = lock(file.clone())?;
    let pool =
        SqlitePoolOptions::new().max_connections(8).connect_with(options).await.map_err(DbError::Open)?;
    copy_before_migrating(&pool, &file, &MIGRATOR).await?;
    MIGRATOR.run(&pool).await.map_err(DbError::Migrate)?;
    Ok((pool, lock))
}

/// OPS-2: before a new version changes a database's schema, a copy of it as it was, beside it
/// (`sublane.db.v<version>`, the schema version it was at): an upgrade that goes wrong, or a
/// downgrade, has the old database to go back to. Named after the version it was taken at, so a
/// later start after an upgrade that failed half-way copies the half-migrated database under
/// another name and the untouched copy stays. Consistent (`VACUUM INTO` reads one snapshot),
/// made under the process lock, written whole before it takes its name, readable by the owner
/// only (it holds what the database holds). A new database, or one already up to date, is not
/// copied. A copy that cannot be made (a full disk) is logged and the upgrade goes on: the copy
/// is a precaution, and each migration is a transaction of its own.
async fn copy_before_migrating(
    pool: &SqlitePool,
    file: &std::path::Path,
    migrator: &sqlx::migrate::Migrator,
) -> Result<(), DbError> {
    if in_memory(file) {
        return Ok(());
    }
    // (no table: a new database, nothing to keep)
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations").fetch_one(pool).await.unwrap_or(None);
    let Some(applied) = applied else { return Ok(()) };
    if !migrator.iter().any(|m| m.version > applied) {
        return Ok(());
    }
    let named = |suffix: &str| {
        let mut path = file.as_os_str().to_owned();
        path.push(suffix);
        PathBuf::from(path)
    };
    let (copy, partial) = (named(&format!(".v{applied:04}")), named(&format!(".v{applied:04}.partial")));
    let made = async {
        if partial.exists() {
            std::fs::remove_file(&partial).map_err(sqlx::Error::Io)?;
        }
        sqlx::query("VACUUM INTO ?").bind(partial.to_string_lossy().into_owned()).execute(pool).await?;
        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o600))
            .map_err(sqlx::Error::Io)?;
        std::fs::rename(&partial, &copy).map_err(sqlx::Error::Io)
    };
    match made.await {
        Ok(()) => tracing::info!(copy = %copy.display(), "database copied before its schema is migrated"),
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            tracing::warn!(copy = %copy.display(), error = %e, "database could not be copied before migrating; migrating anyway");
        }
    }
    Ok(())
}

/// Whether the database's file name is an in-memory database's: no file to lock or copy.
fn in_memory(file: &std::path::Path) -> bool {
    let name = file.to_string_lossy();
    name.is_empty() || name == ":memory:"
}

/// Takes an exclusive advisory lock on `<db file>.lock`. In-memory databases need none.
fn lock(db_file: PathBuf) -> Result<ProcessLock, DbError> {
    if in_memory(&db_file) {
        return Ok(ProcessLock { _file: None });
    }
    let mut lock_path = db_file.clone().into_os_string();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let err = |source| DbError::LockFile { path: lock_path.display().to_string(), source };
    if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(err)?;
    match file.try_lock() {
        Ok(()) => Ok(ProcessLock { _file: Some(file) }),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(DbError::Locked { db: db_file.display().to_string(), lock: lock_path.display().to_string() })
        }
        Err(std::fs::TryLockError::Error(e)) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database behind the binary's migrations is copied, as it was, before they run; a new or
    /// current one is not.
    #[tokio::test]
    async fn a_database_is_copied_before_its_schema_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let steps = dir.path().join("migrations");
        std::fs::create_dir(&steps).unwrap();
        std::fs::write(steps.join("0001_first.sql"), "CREATE TABLE t (a INTEGER);").unwrap();
        let file = dir.path().join("t.db");
        let pool = SqlitePool::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.unwrap();
        let first = sqlx::migrate::Migrator::new(steps.as_path()).await.unwrap();
        copy_before_migrating(&pool, &file, &first).await.unwrap();
        first.run(&pool).await.unwrap();
        copy_before_migrating(&pool, &file, &first).await.unwrap();
        sqlx::query("INSERT INTO t VALUES (7)").execute(&pool).await.unwrap();
        let copies = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".v0"))
                .count()
        };
        assert_eq!(copies(), 0, "a new database, then a current one: no copy");

        std::fs::write(steps.join("0002_second.sql"), "ALTER TABLE t ADD COLUMN b TEXT;").unwrap();
        let second = sqlx::migrate::Migrator::new(steps.as_path()).await.unwrap();
        copy_before_migrating(&pool, &file, &second).await.unwrap();
        second.run(&pool).await.unwrap();
        let copy = dir.path().join("t.db.v0001");
        let old = SqlitePool::connect(&format!("sqlite://{}?mode=ro", copy.display())).await.unwrap();
        let row: (i64,) = sqlx::query_as("SELECT * FROM t").fetch_one(&old).await.unwrap();
        assert_eq!(row, (7,), "the data, in the schema before the migration");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(copies(), 1);
    }

    #[tokio::test]
    async fn second_open_of_the_same_database_is_refused_until_the_first_closes() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let (pool, lock) = open(&url).await.unwrap();
        let err = open(&url).await.unwrap_err();
        assert!(matches!(err, DbError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("another SubLane process"));
        pool.close().await;
        drop(lock);
        let (_pool, _lock) = open(&url).await.unwrap();
    }

    #[tokio::test]
    async fn rebuilding_the_records_table_keeps_rows_and_never_reuses_an_id() {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        sqlx::raw_sql(include_str!("../../migrations/0002_request_records.sql"))
            .execute(&pool)
            .await
            .unwrap();
        let insert = "INSERT INTO request_records (request_id, member_id, model, operation, started_at_ms,
                duration_ms, outcome) VALUES (?, 7, 'm', 'responses', 1, 2, 'success')";
        for id in ["req_a", "req_b", "req_c"] {
            sqlx::query(insert).bind(id).execute(&pool).await.unwrap();
        }
        // The newest row pruned: the table's highest id (2) is below the ids handed out (3).
        sqlx::query("DELETE FROM request_records WHERE id = 3").execute(&pool).await.unwrap();
        sqlx::raw_sql(include_str!("../../migrations/0011_request_records_one_index.sql"))
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query(insert).bind("req_d").execute(&pool).await.unwrap();
        let rows: Vec<(i64, String, i64)> =
            sqlx::query_as("SELECT id, request_id, member_id FROM request_records ORDER BY id")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(
            rows,
            [(1, "req_a".into(), 7), (2, "req_b".into(), 7), (4, "req_d".into(), 7)],
            "rows kept, and id 3 not handed out again"
        );
        let indexes: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'request_records'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(indexes, ["request_records_by_member"]);
    }

    #[tokio::test]
    async fn database_runs_in_wal_mode_with_foreign_keys() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let (pool, _lock) = open(&url).await.unwrap();
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&pool).await.unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys").fetch_one(&pool).await.unwrap();
        assert_eq!(fk, 1);
    }
}
