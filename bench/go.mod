module github.com/dtsched/dts/bench

go 1.26.8

require (
	github.com/dtsched/dts/internal v0.0.0
	github.com/jackc/pgx/v5 v5.12.0
)

require (
	github.com/golang-jwt/jwt/v5 v5.3.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace github.com/dtsched/dts/internal => ../internal
