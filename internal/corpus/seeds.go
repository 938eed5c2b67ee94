package corpus

// GeometrySeeds are geometry objects exercising every parser path: the
// seeds of spatial's geometry fuzzers and inputs of the engines'
// differential tests.
var GeometrySeeds = []string{
	`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`,
	`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`,
	`{"type":"Polygon","coordinates":[[[0,0],[1,0],[NaN,1],[0,1],[0,0]]]}`,
	`{"coordinates":[[[0,0],[1,0],[1,1],[0,0]]],"type":"Polygon"}`,
	`{"type":"MultiPolygon","coordinates":[[[[0,0],[10,0],[10,10],[0,10],[0,0]]],[[[2,2],[3,2],[3,3],[2,2]]]]}`,
	`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2,3]},{"type":"LineString","coordinates":[[1,2],[Infinity,-Infinity]]}]}`,
	`{"geometries":[{"coordinates":[1,2],"type":"Point"}],"type":"GeometryCollection"}`,
	`{"type":"MultiLineString","coordinates":[[[0,0],[1,1]],[[3,4]]]}`,
	`{"type":"MultiPoint","coordinates":[[1e999,0],[-0.0,1E-7]]}`,
	`{"type":"Polygon","coordinates":[]}`,
	`{"type":"Point","coordinates":null}`,
	`{"\u0074ype":"Point","coordinates":[1,2],"bbox":[1,2,1,2],"crs":{"type":"name","properties":{"name":"EPSG:4326"}}}`,
	`null`,
	`[`,
	`{"type":"Point","coordinates":[1,2]} trailing`,
	`{"type":"Point","coordinates":[1,2]}` + "\x00garbage",
	`{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[1,1],[2,1],[2,2],[1,1]],[[20,20],[21,20],[21,21],[20,20]]]}`,
}
