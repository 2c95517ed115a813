# Build: docker build -t gputask-controller:latest .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o /out/gputask-controller .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gputask-controller /gputask-controller
USER 65532:65532
ENTRYPOINT ["/gputask-controller"]
