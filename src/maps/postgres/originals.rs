//! Originals.

use super::*;

#[async_trait]
impl Originals for PostgresStore {
    async fn original(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self
            .query("SELECT * FROM imgcas_originals WHERE hash = $1", &[&raw])
            .await?;
        rows.first().map(original_info).transpose()
    }

    async fn add_original(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        let client = self.client().await?;
        insert_original_on(&client, hash, info).await
    }

    async fn record_download(
        &self,
        url: &str,
        entry: &UrlEntry,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(store_error)?;
        let new = insert_original_on(&txn, &entry.hash, info).await?;
        put_url_on(&txn, url, entry).await?;
        txn.commit().await.map_err(store_error)?;
        Ok(new)
    }

    async fn put_facts(&self, hash: &ContentHash, facts: &OriginalFacts) -> Result<(), MapError> {
        let raw: &[u8] = hash.as_bytes();
        let json = facts_json(Some(facts))?;
        self.execute(
            "UPDATE imgcas_originals SET facts = $2 WHERE hash = $1",
            &[&raw, &json],
        )
        .await
        .map(|_| ())
    }

    async fn remove_original(&self, hash: &ContentHash) -> Result<(), MapError> {
        let raw: &[u8] = hash.as_bytes();
        self.execute("DELETE FROM imgcas_originals WHERE hash = $1", &[&raw])
            .await?;
        self.execute("DELETE FROM imgcas_fingerprints WHERE hash = $1", &[&raw])
            .await
            .map(|_| ())
    }

    async fn original_hashes(&self) -> Result<Vec<ContentHash>, MapError> {
        let rows = self.query("SELECT hash FROM imgcas_originals", &[]).await?;
        rows.iter().map(|row| hash_of(row, "hash")).collect()
    }
}
