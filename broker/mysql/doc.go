// Package mysql is a geodlq dead-letter store in a MySQL or MariaDB table.
package mysql
