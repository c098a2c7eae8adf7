"""The offline model work the command line runs: training from the store, promotion, the model card,
the cross-domain evaluation and its kept work. Above the service loops (it reads the fleet as the
scorer does), below the command line and HTTP; the serve loops never import it."""
