// Package warehouse exports dead letters to GeoParquet 1.1 for BigQuery,
// Redshift, Azure Synapse, DuckDB, GeoPandas and QGIS: the third triage
// path of the managed-queue design, where CRS and parse failures are
// aggregated by source-URI prefix over time to find the providers that
// keep shipping malformed payloads.
//
// It reads any dead-letter store through List ([Lister]; a *broker.Store
// opened read-only is one) and never leases, acknowledges or alters a
// record.
//
//   - [Sync] keeps a Hive-partitioned dataset in a directory and appends,
//     run after run, exactly the records that are new since the last run;
//     a watermark next to the data says where the next run starts.
//   - [Export] and [Writer] write one file.
//
// # Files
//
// Every file has the columns of [Row], in its order, whatever the
// options: one typed column per envelope field an analyst filters on
// (event_id, idempotency_key, failure_class, failed_stage, reason_kind,
// reason, epsg INT32, source_system/topic/partition/offset, source_uri and
// source_prefix, attempts, first_seen_at and dead_lettered_at as UTC
// timestamps, destination (retry or poison), repair_status, payload_size,
// payload_sha256, …) and two GeoParquet geometry columns, WKB encoded:
//
//   - geometry_bbox (primary): the bounding box of the event's geometry,
//     a Polygon, with GeoParquet 1.1's bbox covering column "bbox"
//     (xmin, ymin, xmax, ymax) so warehouses can filter without WKB;
//   - fault_point: the geometry error's location, a Point.
//
// Both are in the payload's own coordinates. In a geographic CRS
// (OGC:CRS84, EPSG:4326, any code [Options.CRS] resolves to a
// GeographicCRS) coordinates beyond ±180 in longitude or ±90 in latitude
// — metres labelled EPSG:4326 — are outside the CRS's valid area: such a
// row has geometry_status "outside_crs_area" and a null geometry_bbox (and
// fault_point, when it lies outside too), so no file's extent holds
// coordinates its CRS cannot. The "geo" metadata states
// their types, extent and CRS: PROJJSON for an EPSG code (from
// [Options.CRS]; package projcrs resolves every code PROJ knows, and
// without it [BuiltinCRS] the common ones), no crs member for a payload
// that declared none (GeoJSON's and GeoParquet's default, OGC:CRS84), and
// crs null for a declared CRS without an EPSG code. Since a column has one
// CRS per file, Sync writes one file per CRS in each partition; the
// geometry_crs column names it in every row.
//
// The original payload is not exported unless [Options.WithPayload] is
// set: then the payload column holds it, restored (offloaded parts fetched
// through [Options.Fetcher]) and verified against payload_sha256. Payloads
// are whatever producers sent — addresses, owners' names, customer
// geometries — so a warehouse that receives them falls under whatever
// rules govern that data; the default export carries only the envelope's
// diagnostics, hashes and sizes.
//
// # Datasets
//
// A [Sync] dataset is laid out for Hive-style readers:
//
//	DIR/dead_lettered_date=2026-05-04/class=crs_mismatch/part-r000007-00003-epsg3857.parquet
//	DIR/_geodlq/watermark.json
//
// dead_lettered_date is the UTC date of dead_lettered_at, class the
// failure class; both are also columns of every file (dead_lettered_at,
// failure_class), so a loader that ignores paths (Redshift COPY) loses
// nothing. Names under _geodlq are not data; staged files end in .tmp.
//
// A run is exactly-once into the files: it starts from the watermark's
// cursors, stages its files under _geodlq/staging, writes a commit record,
// renames the files into place and writes the watermark last. A run
// killed before its commit record leaves no visible file and the old
// watermark; one killed after it is completed by the next Sync or by
// [Recover]. Two syncs of one dataset exclude each other.
//
// The cursor relies on List's order: records written after a page was
// read come after that page's cursor. A SQL store numbers a record when
// its insert starts and may commit a lower number after a higher one is
// visible; [SyncOptions.Settle] leaves records younger than the store's
// longest write for the next run.
//
// repair_status is the record's status when it was exported; a record
// replayed later keeps the status it was exported with (the warehouse is
// an append-only history).
package warehouse
