from gnorm.train.cli import cli

if __name__ == '__main__':
    cli()
